#include "backends/engine/ops/float_matmul.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/tile_grid.hpp"

namespace midtune::engine {

namespace {

void tile_scalar(const FloatMatrix& w, int g0, int g1, const float* x, std::size_t ldx, int t0, int t1, float* y,
                 std::size_t ldy) {
  const int rows_end = std::min(w.rows, g1 * kPackRows);
  for (int t = t0; t < t1; ++t) {
    const float* xt = x + static_cast<std::size_t>(t) * ldx;
    for (int row = g0 * kPackRows; row < rows_end; ++row) {
      float acc = 0.0f;
      for (int k = 0; k < w.cols; ++k) acc += w.weight(row, k) * xt[k];
      y[static_cast<std::size_t>(t) * ldy + row] = acc;
    }
  }
}

}  // namespace

FloatTileFn float_tile_scalar() { return &tile_scalar; }

FloatTileFn float_tile_for(Isa isa, FloatFormat format) {
  return select_body<FloatTileFn>("float_matmul", isa,
                                  {float_tile_scalar(), cpu::float_tile_avx2(), nullptr, cpu::float_tile_avx512(),
                                   format == FloatFormat::bf16 ? cpu::float_tile_avx512bf16() : nullptr});
}

void float_matmul(const FloatMatrix& w, const float* x, int tokens, std::size_t ldx, float* y, std::size_t ldy,
                  Isa isa, bool parallel) {
  if (tokens < 0 || ldx < static_cast<std::size_t>(w.cols)) {
    throw std::invalid_argument("float_matmul: " + std::to_string(tokens) + " activation rows of stride " +
                                std::to_string(ldx) + " for " + std::to_string(w.cols) + " weight columns");
  }
  if (ldy < static_cast<std::size_t>(w.rows)) {
    throw std::invalid_argument("float_matmul: output row stride " + std::to_string(ldy) + " below the " +
                                std::to_string(w.rows) + " outputs");
  }
  const FloatTileFn fn = float_tile_for(isa, w.format);
  for_each_tile(tokens, w.groups, parallel, [&](int t0, int t1, int g0, int g1) {
    fn(w, g0, g1, x, ldx, t0, t1, y, ldy);
  });
}

}  // namespace midtune::engine
