// The tiling arithmetic of the CUDA flash attention body
// (flash_attention_cuda.cu), as plain functions host and device both run:
// which keys a query sees, which key tiles a block of queries visits, which
// of those need the causal / window mask, the padded head size a kernel is
// instantiated for, and the online softmax's rescaling step (Dao 2023,
// FlashAttention-2, Algorithm 1 lines 8-10) with its guards for rows that
// have seen no key yet. tests/engine/flash_attention_tiles_test.cpp checks
// them here, and runs the tiled online softmax they describe against a
// plain softmax, so the kernel's logic is tested on machines without a GPU.
#pragma once

#include <cmath>

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::flash {

// Query t of a call (0 <= t < tokens) after `past` cached keys sees keys
// [first, limit): limit = past + t + 1, first = max(0, limit - window) for a
// sliding window (window > 0), else 0 (cuda_ops.hpp's attention contract).
MIDTUNE_HOST_DEVICE inline int key_limit(int t, int past) { return past + t + 1; }
MIDTUNE_HOST_DEVICE inline int key_first(int t, int past, int window) {
  const int limit = key_limit(t, past);
  return window > 0 && limit > window ? limit - window : 0;
}
MIDTUNE_HOST_DEVICE inline bool key_visible(int t, int key, int past, int window) {
  return key >= key_first(t, past, window) && key < key_limit(t, past);
}

// The queries of a block: [t0, t0 + rows) clipped to the call's tokens (a
// block's rows past the last token compute the last token's row again and
// store nothing, so they need no mask of their own).
MIDTUNE_HOST_DEVICE inline int last_query(int t0, int rows, int tokens) {
  return t0 + rows < tokens ? t0 + rows - 1 : tokens - 1;
}

// The key tiles [begin, end) (tile j: keys [j * key_tile, (j + 1) *
// key_tile)) that block [t0, t0 + rows) visits: from the tile of its first
// query's first key to the tile of its last query's last key. first and
// limit grow with t, so no tile outside holds a key any of its queries sees,
// and every tile inside holds one (window or not: [first, limit) of
// consecutive queries overlap or touch).
struct TileRange {
  int begin = 0, end = 0;
};
MIDTUNE_HOST_DEVICE inline TileRange key_tiles(int t0, int rows, int tokens, int past, int window, int key_tile) {
  const int t1 = last_query(t0, rows, tokens);
  TileRange r;
  r.begin = key_first(t0, past, window) / key_tile;
  r.end = (key_limit(t1, past) + key_tile - 1) / key_tile;
  return r;
}

// Whether tile j holds a key some query of the block does not see: then the
// kernel masks it key by key; the tiles between need no test (the causal
// diagonal and the window's edge are the only masked tiles).
MIDTUNE_HOST_DEVICE inline bool tile_needs_mask(int j, int t0, int rows, int tokens, int past, int window,
                                                int key_tile) {
  const int t1 = last_query(t0, rows, tokens);
  const int k0 = j * key_tile, k1 = k0 + key_tile;  // keys [k0, k1)
  // Every query sees [first(t1), limit(t0)), the intersection of their ranges.
  return k0 < key_first(t1, past, window) || k1 > key_limit(t0, past);
}

// The head size a kernel is instantiated for: 64, 128 or 256 (dimensions
// past head_dim are zero in Q, K and V, adding nothing); 0 above 256.
MIDTUNE_HOST_DEVICE inline int padded_head_dim(int head_dim) {
  return head_dim <= 0 ? 0 : head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : head_dim <= 256 ? 256 : 0;
}

// One step of the online softmax of a row whose running maximum is `m` (in
// log2 units: the kernel keeps scores times log2 e, so exp2 is its
// exponential) on meeting a tile whose maximum is `tile_max`: the new
// maximum, the factor alpha = 2^(m - m_new) the row's sum and output are
// rescaled by, and the base the tile's weights 2^(s - base) are taken from.
// A row that has seen only masked keys (-inf) keeps base 0, so its weights
// are 2^-inf = 0 and alpha 0 rather than NaN from -inf - -inf.
struct Rescale {
  float m_new, alpha, base;
};
MIDTUNE_HOST_DEVICE inline Rescale online_rescale(float m, float tile_max) {
  Rescale r;
  r.m_new = m > tile_max ? m : tile_max;
  r.base = r.m_new == -INFINITY ? 0.0f : r.m_new;
  r.alpha = ::exp2f(m - r.base);
  return r;
}

// A score in the kernel's log2 units: shape(scale * dot) (elementwise::
// shape_score; off: unshaped) times log2 e; -inf where the query does not
// see the key. `distance` = (past + t) - key.
MIDTUNE_HOST_DEVICE inline float log2_score(float dot, float scale, float softcap, float slope, int distance,
                                            bool visible) {
  constexpr float kLog2e = 1.4426950408889634f;
  if (!visible) return -INFINITY;
  float s = dot * scale;
  if (softcap != 0.0f || slope != 0.0f) s = elementwise::shape_score(s, softcap, slope, distance);
  return s * kLog2e;
}

}  // namespace midtune::engine::flash
