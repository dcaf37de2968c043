#include "backends/engine/kernels/quantize_rows.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace midtune::engine {

namespace {

// Converting NaN or infinity to int is undefined behaviour, and a result
// computed from one is garbage: stop with the place it was found instead.
void require_finite_rows(const float* x, int rows, int cols, std::size_t ld) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * ld;
    bool finite = true;
    for (int i = 0; i < cols; ++i) finite &= std::isfinite(xr[i]);  // branch-free: vectorises
    if (finite) continue;
    const int col = static_cast<int>(std::find_if(xr, xr + cols, [](float v) { return !std::isfinite(v); }) - xr);
    throw std::domain_error("engine: non-finite activation (" + std::to_string(xr[col]) + ") at row " +
                            std::to_string(r) + ", column " + std::to_string(col) +
                            " of a layer input: the model's weights or the intervention's values overflow");
  }
}

}  // namespace

void quantize_rows(const float* x, int rows, int cols, std::size_t ld, QuantizedRows& out, Isa isa) {
  require_finite_rows(x, rows, cols, ld);
  const int blocks = (cols + kQuantBlock - 1) / kQuantBlock;
  const bool reshape = out.rows != rows || out.blocks != blocks;
  out.rows = rows;
  out.cols = cols;
  out.blocks = blocks;
  if (reshape) {
    const std::size_t nblocks = static_cast<std::size_t>(rows) * blocks;
    out.q.ensure(nblocks * kQuantBlock);
    out.d.ensure(nblocks);
    out.s.ensure(nblocks);
  }
  const QuantizeRowFn fast =
      isa == Isa::avx512vnni && isa_available(isa) && cols % kQuantBlock == 0 ? quantize_row_avx512() : nullptr;
  if (fast != nullptr) {
    for (int r = 0; r < rows; ++r) {
      const std::size_t first = static_cast<std::size_t>(r) * blocks;
      fast(x + r * ld, blocks, out.q.data() + first * kQuantBlock, out.d.data() + first, out.s.data() + first);
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * ld;
    std::int8_t* qr = out.q.data() + static_cast<std::size_t>(r) * blocks * kQuantBlock;
    for (int b = 0; b < blocks; ++b) {
      const int begin = b * kQuantBlock;
      const int end = std::min(cols, begin + kQuantBlock);
      float amax = 0.0f;
      for (int i = begin; i < end; ++i) amax = std::max(amax, std::fabs(xr[i]));
      const float d = amax / 127.0f;
      const float inv = d >= kMinQuantScale ? 1.0f / d : 0.0f;
      int sum = 0;
      for (int i = begin; i < begin + kQuantBlock; ++i) {
        const int q = i < end ? static_cast<int>(std::nearbyint(xr[i] * inv)) : 0;
        qr[i] = static_cast<std::int8_t>(q);
        sum += q;
      }
      out.d[static_cast<std::size_t>(r) * blocks + b] = d;
      out.s[static_cast<std::size_t>(r) * blocks + b] = d * static_cast<float>(sum);
    }
  }
}

}  // namespace midtune::engine
