#include "backends/engine/ops/quantize_rows.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine {

namespace {

// Converting NaN or infinity to int is undefined behaviour, and a result
// computed from one is garbage: stop with the place it was found instead.
bool row_finite(const float* xr, int cols) {
  // On the exponent bits (all ones: NaN or infinity): GCC vectorises this
  // integer OR-reduction, not a loop over std::isfinite, which ran one
  // element at a time and cost as much as the quantisation.
  std::uint32_t non_finite = 0;
  for (int i = 0; i < cols; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, xr + i, sizeof bits);
    non_finite |= static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return non_finite == 0;
}

// Throws std::domain_error naming the first NaN or infinity in row order.
void require_finite_rows(const float* x, int rows, int cols, std::size_t ld) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * ld;
    if (row_finite(xr, cols)) continue;
    const int col = static_cast<int>(std::find_if(xr, xr + cols, [](float v) { return !std::isfinite(v); }) - xr);
    throw std::domain_error("engine: non-finite activation (" + std::to_string(xr[col]) + ") at row " +
                            std::to_string(r) + ", column " + std::to_string(col) +
                            " of a layer input: the model's weights or the intervention's values overflow");
  }
}

void quantize_row_reference(const float* x, int cols, std::int8_t* q, float* d, float* s) {
  const int blocks = (cols + kQuantBlock - 1) / kQuantBlock;
  for (int b = 0; b < blocks; ++b) {
    const int begin = b * kQuantBlock;
    const int end = std::min(cols, begin + kQuantBlock);
    float amax = 0.0f;
    for (int i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = amax / 127.0f;
    const float inv = scale >= kMinQuantScale ? 1.0f / scale : 0.0f;
    int sum = 0;
    for (int i = begin; i < begin + kQuantBlock; ++i) {
      const int qi = i < end ? static_cast<int>(std::nearbyint(x[i] * inv)) : 0;
      q[i] = static_cast<std::int8_t>(qi);
      sum += qi;
    }
    d[b] = scale;
    s[b] = scale * static_cast<float>(sum);
  }
}

}  // namespace

QuantizeRowFn quantize_row_scalar() { return &quantize_row_reference; }

QuantizeRowFn quantize_row_for(Isa isa) {
  return select_body<QuantizeRowFn>("quantize_rows", isa,
                                    {quantize_row_scalar(), cpu::quantize_row_avx2(), nullptr, cpu::quantize_row_avx512()});
}

void quantize_rows(const float* x, int rows, int cols, std::size_t ld, QuantizedRows& out, Isa isa) {
  if (rows < 0 || cols <= 0 || ld < static_cast<std::size_t>(cols)) {
    throw std::invalid_argument("quantize_rows: " + std::to_string(rows) + " rows of " + std::to_string(cols) +
                                " columns with stride " + std::to_string(ld));
  }
  const QuantizeRowFn body = quantize_row_for(isa);
  const int blocks = (cols + kQuantBlock - 1) / kQuantBlock;
  const bool reshape = out.rows != rows || out.blocks != blocks;
  out.rows = rows;
  out.cols = cols;
  out.has_digits = false;
  out.blocks = blocks;
  if (reshape) {
    const std::size_t nblocks = static_cast<std::size_t>(rows) * blocks;
    out.q.ensure(nblocks * kQuantBlock);
    out.d.ensure(nblocks);
    out.s.ensure(nblocks);
  }
  // Rows in parallel chunks (a prefill's matmul input is hundreds of rows,
  // and a serial pass here left the other threads idle). A chunk that finds
  // a NaN or infinity stops; the whole input is then checked in row order,
  // so the error names the first bad element whichever chunk ran first.
  constexpr int kRowChunk = 16;
  std::atomic<bool> non_finite{false};
  const auto quantize_chunk = [&](const tbb::blocked_range<int>& chunk) {
    for (int r = chunk.begin(); r < chunk.end(); ++r) {
      const float* xr = x + static_cast<std::size_t>(r) * ld;
      if (!row_finite(xr, cols)) {
        non_finite = true;
        return;
      }
      const std::size_t first = static_cast<std::size_t>(r) * blocks;
      body(xr, cols, out.q.data() + first * kQuantBlock, out.d.data() + first, out.s.data() + first);
    }
  };
  const tbb::blocked_range<int> all(0, rows, kRowChunk);
  if (rows <= kRowChunk) {
    quantize_chunk(all);  // decode: one row, no task to spawn
  } else {
    tbb::parallel_for(all, quantize_chunk);
  }
  if (non_finite) require_finite_rows(x, rows, cols, ld);
}

void add_digits(QuantizedRows& x) {
  const std::size_t nblocks = static_cast<std::size_t>(x.rows) * x.blocks;
  x.digits.ensure(nblocks * 2 * kQuantBlock);
  const std::int8_t* q = x.q.data();
  std::int8_t* out = x.digits.data();
  for (std::size_t b = 0; b < nblocks; ++b, q += kQuantBlock, out += 2 * kQuantBlock) {
    // Byte arithmetic the compiler vectorises: lo = ((q + 8) mod 16) - 8, and
    // q - lo is a multiple of 16.
    for (int i = 0; i < kQuantBlock; ++i) {
      const int lo = ((q[i] + 8) & 15) - 8;
      out[i] = static_cast<std::int8_t>(lo);
      out[kQuantBlock + i] = static_cast<std::int8_t>((q[i] - lo) / 16);
    }
  }
  x.has_digits = true;
}

}  // namespace midtune::engine
