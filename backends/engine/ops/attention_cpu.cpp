#include "backends/engine/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine {

namespace {

template <class E>
void attention_reference_over(const AttentionTile& tile, const CacheView<E>& kv, float scale, float* scratch) {
  int max_limit = 0;
  for (int r = 0; r < tile.count; ++r) max_limit = std::max(max_limit, tile.limit[r]);
  for (int r = 0; r < tile.count; ++r) {
    float* p = scratch + static_cast<std::size_t>(r) * max_limit;
    const float* q = tile.q[r];
    float best = -std::numeric_limits<float>::infinity();
    const int first = tile.first[r];
    std::fill(p, p + first, 0.0f);
    for (int k = first; k < tile.limit[r]; ++k) {
      float dot = 0.0f;
      for (int i = 0; i < kv.head_dim; ++i) dot += q[i] * cache_value(kv.kt[key_offset(k, i, kv.head_dim)]);
      p[k] = dot * scale;
    }
    shape_scores(tile, r, p);
    for (int k = first; k < tile.limit[r]; ++k) best = std::max(best, p[k]);
    float sum = 0.0f;
    for (int k = first; k < tile.limit[r]; ++k) {
      p[k] = std::exp(p[k] - best);
      sum += p[k];
    }
    for (int k = first; k < tile.limit[r]; ++k) p[k] /= sum;
    if (tile.key0_weight != nullptr) tile.key0_weight[r] = p[0];
    if (tile.log_sum_exp != nullptr) tile.log_sum_exp[r] = best + std::log(sum);
    if (tile.probs_out[r] != nullptr) std::memcpy(tile.probs_out[r], p, sizeof(float) * tile.limit[r]);
    float* out = tile.out[r];
    std::fill(out, out + kv.head_dim, 0.0f);
    for (int k = first; k < tile.limit[r]; ++k) {
      const E* vk = kv.v + static_cast<std::size_t>(k) * kv.v_ld;
      for (int i = 0; i < kv.head_dim; ++i) out[i] += p[k] * cache_value(vk[i]);
    }
  }
}

void attention_reference(const AttentionTile& tile, const KeyValueView& kv, float scale, float* scratch) {
  with_cache(kv, [&](const auto& cache) { attention_reference_over(tile, cache, scale, scratch); });
}

}  // namespace

AttentionFn attention_scalar() { return &attention_reference; }

AttentionFn attention_for(Isa isa) {
  return select_body<AttentionFn>("attention", isa, {attention_scalar(), cpu::attention_avx2(), nullptr, cpu::attention_avx512()});
}

const AttentionParts* attention_parts_for(Isa isa) {
  const AttentionFn body = attention_for(isa);
  if (body == cpu::attention_avx512() && body != nullptr) return cpu::attention_parts_avx512();
  if (body == cpu::attention_avx2() && body != nullptr) return cpu::attention_parts_avx2();
  return nullptr;
}

void check_attention_args(const AttentionTile& tile, const KeyValueView& kv) {
  if (tile.count < 1 || tile.count > kAttentionTile) {
    throw std::invalid_argument("attention: tile of " + std::to_string(tile.count) + " queries (1.." +
                                std::to_string(kAttentionTile) + ")");
  }
  const bool fp32_set = kv.kt != nullptr && kv.v != nullptr, fp32_unset = kv.kt == nullptr && kv.v == nullptr;
  const bool bf16_set = kv.kt_bf16 != nullptr && kv.v_bf16 != nullptr,
             bf16_unset = kv.kt_bf16 == nullptr && kv.v_bf16 == nullptr;
  const bool fp32 = fp32_set && bf16_unset, bf16 = bf16_set && fp32_unset;
  if (kv.head_dim <= 0 || !(fp32 || bf16)) {
    throw std::invalid_argument("attention: key/value view without keys and values of one form, or head_dim");
  }
  for (int r = 0; r < tile.count; ++r) {
    if (tile.q[r] == nullptr || tile.out[r] == nullptr || tile.limit[r] < 1) {
      throw std::invalid_argument("attention: query " + std::to_string(r) + " lacks q, out or a key limit >= 1");
    }
    if (tile.first[r] < 0 || tile.first[r] >= tile.limit[r]) {
      throw std::invalid_argument("attention: query " + std::to_string(r) + " has first key " +
                                  std::to_string(tile.first[r]) + " outside [0, limit " +
                                  std::to_string(tile.limit[r]) + ")");
    }
  }
}

}  // namespace midtune::engine
