// Register tiling over tokens, shared by the packed matmul's ymm bodies:
// tokens [t0, t1) in tiles of Tile tokens, then one tile of the rest, each
// run as tile.template operator()<M>(first token) with M known at compile
// time (a body keeps M tokens' accumulators in registers).
#pragma once

namespace midtune::engine::cpu {

template <int M, class TileFn>
void remainder_tile(int t, int count, TileFn& tile) {
  if constexpr (M >= 1) {
    if (count == M) {
      tile.template operator()<M>(t);
    } else {
      remainder_tile<M - 1>(t, count, tile);
    }
  }
}

template <int Tile, class TileFn>
void for_token_tiles(int t0, int t1, TileFn&& tile) {
  int t = t0;
  for (; t + Tile <= t1; t += Tile) tile.template operator()<Tile>(t);
  if (t < t1) remainder_tile<Tile - 1>(t, t1 - t, tile);
}

// The ymm bodies run a 16-row group as two halves of 8 int32 lanes, one
// half over all blocks at a time: tile.template operator()<M>(half, first
// token, lanes) for each half that has rows (`rows` of the group exist) and
// each token tile.
template <int Tile, class TileFn>
void for_half_token_tiles(int rows, int t0, int t1, TileFn&& tile) {
  for (int half = 0; half < 2; ++half) {
    const int lanes = rows - half * 8 < 8 ? rows - half * 8 : 8;
    if (lanes <= 0) break;
    for_token_tiles<Tile>(t0, t1, [&]<int M>(int t) { tile.template operator()<M>(half, t, lanes); });
  }
}

}  // namespace midtune::engine::cpu
