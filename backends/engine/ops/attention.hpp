// Causal attention for a tile of queries that share one key/value head:
//   p = softmax(shape(scale * q K^T)) over keys [first, limit), out = p V
// (shape: the architecture's soft-cap and ALiBi bias, elementwise.hpp's
// ScoreShaping; off, the scores stay as they are)
// (first > 0: a sliding attention window; keys before it get weight 0).
// Keys are stored transposed in blocks of 16 keys (key_offset below): a
// block's head_dim x 16 floats are contiguous, so 16 keys' scores come from
// one vector FMA per head-dimension element over one 4 KiB stream; values
// row-major.
// Bodies: scalar, AVX2, AVX-512; dispatch as in ops/dispatch.hpp; the SIMD
// bodies hand a head_dim that is not a multiple of 16 to the scalar body.
// Arguments checked (check_attention_args): 1 <= count <= kAttentionTile,
// every q / out set, 0 <= first < limit, head_dim > 0, keys and values set.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine {

// Queries per kernel call, at most: e.g. the 3 query heads of a GQA group x
// 4 positions, so every key and value row loaded serves 12 queries.
inline constexpr int kAttentionTile = 12;

struct AttentionTile {
  int count = 0;                                // queries in this tile (1..kAttentionTile)
  const float* q[kAttentionTile] = {};          // head_dim floats each (already rotated)
  float* out[kAttentionTile] = {};              // head_dim floats each
  int limit[kAttentionTile] = {};               // key count visible to each query (causal)
  int first[kAttentionTile] = {};               // first key visible (sliding window; 0 = all)
  // Readouts, optional: where non-null, each query's softmax row (limit
  // floats: the last query's row for Ms-PoE awareness and SIW density), its
  // weight on key 0 (count floats: SIW corrects the output with it outside
  // the kernel, out += (alpha - 1) p0 v0) and the log of its softmax's
  // denominator, max + log sum exp(p - max) over its shaped scores (count
  // floats: two attentions over disjoint keys merge with it).
  float* probs_out[kAttentionTile] = {};
  float* key0_weight = nullptr;
  float* log_sum_exp = nullptr;
  // Score shaping (elementwise::shape_score; 0: off): the soft-cap of every
  // score, and each query's ALiBi slope (its head's).
  float softcap = 0.0f;
  float alibi_slope[kAttentionTile] = {};
};

// Query r's scaled scores p[first, limit) shaped in place; nothing where
// the tile shapes none, so unshaped results stay bit-identical.
inline void shape_scores(const AttentionTile& tile, int r, float* p) {
  if (tile.softcap == 0.0f && tile.alibi_slope[r] == 0.0f) return;
  const int last = tile.limit[r] - 1;
  for (int k = tile.first[r]; k <= last; ++k) {
    p[k] = elementwise::shape_score(p[k], tile.softcap, tile.alibi_slope[r], last - k);
  }
}

struct KeyValueView {
  const float* kt = nullptr;  // [key / 16][head_dim][16], whole 16-key blocks (bodies load whole blocks)
  const float* v = nullptr;   // [keys][v_ld]
  std::size_t v_ld = 0;
  int head_dim = 0;
  // A bf16 cache instead of kt and v: the same layouts in bf16 bits, each
  // read as its exact float (elementwise::bf16_value), so a bf16 cache gives
  // the fp32 cache's results over the same rounded keys and values.
  const std::uint16_t* kt_bf16 = nullptr;
  const std::uint16_t* v_bf16 = nullptr;
  bool bf16() const { return kt_bf16 != nullptr; }
};

// A view's storage as the bodies read it: E is float or std::uint16_t (bf16
// bits). with_cache calls f with the one the view holds.
template <class E>
struct CacheView {
  const E* kt;
  const E* v;
  std::size_t v_ld;
  int head_dim;
};
template <class F>
inline void with_cache(const KeyValueView& kv, const F& f) {
  if (kv.bf16()) {
    f(CacheView<std::uint16_t>{kv.kt_bf16, kv.v_bf16, kv.v_ld, kv.head_dim});
  } else {
    f(CacheView<float>{kv.kt, kv.v, kv.v_ld, kv.head_dim});
  }
}
inline float cache_value(float x) { return x; }
inline float cache_value(std::uint16_t bits) { return elementwise::bf16_value(bits); }

inline constexpr int kKeyBlock = 16;

// Offset of element i of key `key` in the blocked transposed key layout.
inline std::size_t key_offset(int key, int i, int head_dim) {
  return (static_cast<std::size_t>(key / kKeyBlock) * head_dim + i) * kKeyBlock + key % kKeyBlock;
}

// `scratch` holds kAttentionTile * max(limit) floats.
using AttentionFn = void (*)(const AttentionTile& tile, const KeyValueView& kv, float scale,
                             float* scratch);

AttentionFn attention_scalar();
AttentionFn attention_for(Isa isa);  // the dispatch rule of ops/dispatch.hpp

// p V sums each output over the keys in chunks of kValueKeyChunk keys (a
// multiple of kKeyBlock), each chunk's sum from zero, and adds the chunks'
// sums in key order. The SIMD bodies and their parts both do, so a decode
// step split across threads by key chunks gives the whole body's bits.
inline constexpr int kValueKeyChunk = 128;

// A SIMD body in three parts, for a decode step whose few tiles would leave
// threads idle: the scaled scores of keys [k_begin, k_end) (k_begin a
// multiple of kKeyBlock), query r's softmax with its readouts, and one key
// chunk's p V for every query of the tile: keys [k_begin, k_end) with
// k_begin a multiple of kValueKeyChunk and k_end = min(max_limit, k_begin +
// kValueKeyChunk), into `partial` (tile.count rows of head_dim floats). The
// scores of all keys, then every row's softmax, then every chunk's p V and
// add_value_chunks give the body's results bit for bit: each score and each
// output is the same chain of operations. For head_dim a multiple of
// kKeyBlock; `scratch` as the body's, rows of max_limit floats, max_limit =
// max(limit).
struct AttentionParts {
  void (*scores)(const AttentionTile& tile, const KeyValueView& kv, float scale, float* scratch, int max_limit,
                 int k_begin, int k_end);
  void (*softmax_row)(const AttentionTile& tile, int r, float* scratch, int max_limit);
  void (*values)(const AttentionTile& tile, const KeyValueView& kv, const float* scratch, int max_limit,
                 int k_begin, int k_end, float* partial);
};

// The tile's outputs from its `chunks` key chunks' partial sums (chunk j's
// rows at partials + j * chunk_stride, head_dim floats apart), added in key
// order.
inline void add_value_chunks(const AttentionTile& tile, const float* partials, int chunks, int head_dim,
                             std::size_t chunk_stride) {
  for (int r = 0; r < tile.count; ++r) {
    float* out = tile.out[r];
    const float* first = partials + static_cast<std::size_t>(r) * head_dim;
    for (int c = 0; c < head_dim; ++c) out[c] = first[c];
    for (int j = 1; j < chunks; ++j) {
      const float* part = first + j * chunk_stride;
      for (int c = 0; c < head_dim; ++c) out[c] += part[c];
    }
  }
}

// The parts of the body attention_for(isa) runs; nullptr where that is the
// scalar body (which has no parts).
const AttentionParts* attention_parts_for(Isa isa);

// Throws std::invalid_argument naming the broken argument.
void check_attention_args(const AttentionTile& tile, const KeyValueView& kv);

// The op: arguments checked, then `body` (from attention_for) runs.
inline void attention(AttentionFn body, const AttentionTile& tile, const KeyValueView& kv, float scale,
                      float* scratch) {
  check_attention_args(tile, kv);
  body(tile, kv, scale, scratch);
}

}  // namespace midtune::engine
