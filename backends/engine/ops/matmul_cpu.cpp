#include "backends/engine/ops/matmul.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/fp16.hpp"
#include "backends/engine/ops/tile_grid.hpp"

namespace midtune::engine {

namespace {

void tile_scalar(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1,
                 float* y, std::size_t ldy) {
  const int rows = std::min(kPackRows, w.rows - group * kPackRows);
  for (int t = t0; t < t1; ++t) {
    const std::int8_t* xq = x.row_q(t);
    const float* xd = x.row_d(t);
    const float* xs = x.row_s(t);
    float acc[kPackRows] = {};
    for (int b = 0; b < w.blocks; ++b) {
      const std::uint8_t* blk = w.at(group, b);
      const std::int8_t* a = xq + b * kQuantBlock;
      for (int r = 0; r < rows; ++r) {
        std::int32_t dot = 0;
        for (int k = 0; k < kQuantBlock; ++k) dot += packed_u(w, blk, r, k) * a[k];
        acc[r] += packed_d(w, blk, r) * xd[b] * static_cast<float>(dot) + packed_min(w, blk, r) * xs[b];
      }
    }
    for (int r = 0; r < rows; ++r) y[static_cast<std::size_t>(t) * ldy + group * kPackRows + r] = acc[r];
  }
}

}  // namespace

PackedTileFn packed_tile_scalar() { return &tile_scalar; }

PackLayout packed_layout_for(Isa isa) {
  const PackedTileFn fn = packed_tile_for(isa);
  return fn == packed_tile_scalar() || fn == cpu::matmul_tile_avx2() ? PackLayout::compact : PackLayout::bytes;
}

PackedTileFn packed_tile_for(Isa isa) {
  return select_body<PackedTileFn>("matmul", isa, {packed_tile_scalar(), cpu::matmul_tile_avx2(),
                                                   cpu::matmul_tile_avxvnni(), cpu::matmul_tile_avx512vnni()});
}

void packed_matmul(const PackedMatrix& w, QuantizedRows& x, float* y, std::size_t ldy,
                   Isa isa, bool parallel) {
  if (x.blocks != w.blocks) {
    throw std::invalid_argument("matmul: activations have " + std::to_string(x.cols) +
                                " columns, weights " + std::to_string(w.cols));
  }
  if (ldy < static_cast<std::size_t>(w.rows)) {
    throw std::invalid_argument("matmul: output row stride " + std::to_string(ldy) + " below the " +
                                std::to_string(w.rows) + " outputs");
  }
  const PackedTileFn fn = packed_tile_for(isa);
  if (w.compact_only() && packed_layout_for(isa) != PackLayout::compact) {
    throw std::invalid_argument(std::string("matmul: the ") + to_string(isa) +
                                " body reads the bytes layout, this matrix is packed compact (pack it for the ISA "
                                "that multiplies it: packed_layout_for)");
  }
  // The AVX2 body's one-token path multiplies full bytes by x's digits (one
  // row's worth: cheaper to make than to decide whether w needs them).
  if (fn == cpu::matmul_tile_avx2() && x.rows == 1 && !x.has_digits) add_digits(x);
  for_each_tile(x.rows, w.groups, parallel, [&](int t0, int t1, int g0, int g1) {
    for (int g = g0; g < g1; ++g) fn(w, g, x, t0, t1, y, ldy);
  });
}

}  // namespace midtune::engine
