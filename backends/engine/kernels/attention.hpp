// Causal attention for a tile of queries that share one key/value head:
//   p = softmax(scale * q K^T) over keys [0, limit), out = p V.
// Keys are stored transposed (kt[i * kt_ld + key]) so 16 keys' scores come
// from one vector FMA per head-dimension element; values row-major.
#pragma once

#include <cstddef>

#include "backends/engine/kernels/cpu_features.hpp"

namespace midtune::engine {

inline constexpr int kAttentionTile = 4;  // queries per kernel call, at most

struct AttentionTile {
  int count = 0;                                // queries in this tile (1..kAttentionTile)
  const float* q[kAttentionTile] = {};          // head_dim floats each (already rotated)
  float* out[kAttentionTile] = {};              // head_dim floats each
  int limit[kAttentionTile] = {};               // key count visible to each query (causal)
  // Issue-5 hooks, all optional:
  // SIW: post-softmax factor on the weight of key 0, per query, without
  // renormalisation (nullptr = 1).
  const float* initial_key_scale = nullptr;
  // A copy of each query's softmax row (limit floats) where non-null: the
  // last query's attention row for Ms-PoE awareness and PHS.
  float* probs_out[kAttentionTile] = {};
};

struct KeyValueView {
  const float* kt = nullptr;  // [head_dim][kt_ld]
  std::size_t kt_ld = 0;
  const float* v = nullptr;   // [keys][v_ld]
  std::size_t v_ld = 0;
  int head_dim = 0;
};

// `scratch` holds kAttentionTile * max(limit) floats.
using AttentionFn = void (*)(const AttentionTile& tile, const KeyValueView& kv, float scale,
                             float* scratch);

AttentionFn attention_scalar();
AttentionFn attention_avx512();  // nullptr when not compiled in
// AVX2 machines use the scalar kernel (attention is a small share of prefill there).
AttentionFn attention_for(Isa isa);

}  // namespace midtune::engine
