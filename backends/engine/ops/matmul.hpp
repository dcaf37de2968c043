// y[t][n] = sum_k x[t][k] * W[n][k] for packed weights W and int8-quantised
// activations x (prefill: many rows t; decode: one). Per block of 32:
//   d_w d_x sum(u q) + m_w s_x          (Q4_1 x Q8_1, as in ggml's vec_dot)
// The int32 dot products are exact in every path, so fast paths differ from
// the scalar reference only by float summation order.
// Bodies: scalar, AVX2 (vpmaddubsw), AVX-512 VNNI (vpdpbusd); dispatch as in
// ops/dispatch.hpp. Arguments checked: x.cols == w.cols, ldy >= w.rows, and
// that the body reads w's layout (packed_matrix.hpp: the AVX-512 and AVX-VNNI
// bodies read only the bytes layout).
#pragma once

#include <cstddef>

#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/packed_matrix.hpp"
#include "backends/engine/ops/quantize_rows.hpp"

namespace midtune::engine {

// One kernel call: rows [t0, t1) of x against row group `group` of w, writing
// y[t][group*16 + r] for the rows that exist. Called for one token, the AVX2
// body multiplies full 8-bit weights by x's digits (quantize_rows.hpp), so
// it needs x.has_digits there; packed_matmul adds them.
using PackedTileFn = void (*)(const PackedMatrix& w, int group, const QuantizedRows& x, int t0,
                              int t1, float* y, std::size_t ldy);

PackedTileFn packed_tile_scalar();
PackedTileFn packed_tile_for(Isa isa);  // the dispatch rule of ops/dispatch.hpp

// The layout to pack a matrix in for the body packed_tile_for(isa) runs:
// compact for the scalar and AVX2 bodies (which read both), bytes for the
// others.
PackLayout packed_layout_for(Isa isa);

// The whole product, parallel over row groups and token chunks with oneTBB
// when `parallel`. x.cols must equal w.cols. Adds x's digits first when the
// body chosen for `isa` multiplies by them (AVX2, one token).
void packed_matmul(const PackedMatrix& w, QuantizedRows& x, float* y, std::size_t ldy,
                   Isa isa, bool parallel = true);

}  // namespace midtune::engine
