#include "backends/engine/kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace midtune::engine {

namespace {

void attention_reference(const AttentionTile& tile, const KeyValueView& kv, float scale,
                         float* scratch) {
  int max_limit = 0;
  for (int r = 0; r < tile.count; ++r) max_limit = std::max(max_limit, tile.limit[r]);
  for (int r = 0; r < tile.count; ++r) {
    float* p = scratch + static_cast<std::size_t>(r) * max_limit;
    const float* q = tile.q[r];
    float best = -std::numeric_limits<float>::infinity();
    for (int k = 0; k < tile.limit[r]; ++k) {
      float dot = 0.0f;
      for (int i = 0; i < kv.head_dim; ++i) dot += q[i] * kv.kt[key_offset(k, i, kv.head_dim)];
      p[k] = dot * scale;
      best = std::max(best, p[k]);
    }
    float sum = 0.0f;
    for (int k = 0; k < tile.limit[r]; ++k) {
      p[k] = std::exp(p[k] - best);
      sum += p[k];
    }
    for (int k = 0; k < tile.limit[r]; ++k) p[k] /= sum;
    if (tile.initial_key_scale != nullptr && tile.limit[r] > 0) p[0] *= tile.initial_key_scale[r];
    if (tile.probs_out[r] != nullptr) std::memcpy(tile.probs_out[r], p, sizeof(float) * tile.limit[r]);
    float* out = tile.out[r];
    std::fill(out, out + kv.head_dim, 0.0f);
    for (int k = 0; k < tile.limit[r]; ++k) {
      const float* vk = kv.v + static_cast<std::size_t>(k) * kv.v_ld;
      for (int i = 0; i < kv.head_dim; ++i) out[i] += p[k] * vk[i];
    }
  }
}

}  // namespace

AttentionFn attention_scalar() { return &attention_reference; }

AttentionFn attention_for(Isa isa) {
  if (isa == Isa::avx512vnni && isa_available(isa) && attention_avx512() != nullptr) {
    return attention_avx512();
  }
  if (isa != Isa::scalar && isa_available(Isa::avx2) && attention_avx2() != nullptr) return attention_avx2();
  return attention_scalar();
}

}  // namespace midtune::engine
