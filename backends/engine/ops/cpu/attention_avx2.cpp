// AVX2 attention tile (machines without AVX-512): the AVX-512 kernel's plan
// on 8-float vectors, in sub-tiles of 4 queries to fit 16 ymm registers.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/cpu/exp_coefficients.hpp"

namespace midtune::engine {

namespace {

// exp_coefficients.hpp; 2^n built in the exponent bits.
inline __m256 exp_ps(__m256 x) {
  namespace c = exp_coefficients;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(c::kMin)), _mm256_set1_ps(c::kMax));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(c::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(c::kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(c::kLn2Low), r);
  __m256 p = _mm256_set1_ps(c::kPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kPoly[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
}

// Scores of queries [r0, r0 + R) against keys [0, max_limit), scaled.
template <int R>
void scores(const AttentionTile& tile, int r0, const KeyValueView& kv, float scale, float* scratch, int max_limit) {
  for (int k0 = 0; k0 < max_limit; k0 += 8) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    // Keys k0..k0+7 sit in one 16-key block: element i at block + i * 16 + (k0 % 16).
    const float* block = kv.kt + static_cast<std::size_t>(k0 / kKeyBlock) * kv.head_dim * kKeyBlock + k0 % kKeyBlock;
    for (int i = 0; i < kv.head_dim; ++i) {
      const __m256 keys = _mm256_loadu_ps(block + i * kKeyBlock);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(tile.q[r0 + r] + i), keys, acc[r]);
    }
    const int valid = std::min(8, max_limit - k0);
    for (int r = 0; r < R; ++r) {
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_mul_ps(acc[r], _mm256_set1_ps(scale)));
      std::memcpy(scratch + static_cast<std::size_t>(r0 + r) * max_limit + k0, out, sizeof(float) * valid);
    }
  }
}

void softmax_row(float* p, int limit) {
  float best = -3.0e38f;
  for (int k = 0; k < limit; ++k) best = std::max(best, p[k]);
  __m256 sum = _mm256_setzero_ps();
  int k = 0;
  for (; k + 8 <= limit; k += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(p + k), _mm256_set1_ps(best)));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(p + k, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  if (k < limit) {
    alignas(32) float tail[8] = {};
    for (int i = 0; i < limit - k; ++i) tail[i] = p[k + i] - best;
    for (int i = limit - k; i < 8; ++i) tail[i] = -100.0f;
    _mm256_store_ps(tail, exp_ps(_mm256_load_ps(tail)));
    for (int i = 0; i < limit - k; ++i) {
      p[k + i] = tail[i];
      total += tail[i];
    }
  }
  const float inv = 1.0f / total;
  for (int i = 0; i < limit; ++i) p[i] *= inv;
}

template <int R>
void weighted_values(const AttentionTile& tile, int r0, const KeyValueView& kv, const float* scratch, int max_limit) {
  for (int c = 0; c < kv.head_dim; c += 16) {
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float* vk = kv.v + c;
    for (int k = 0; k < max_limit; ++k, vk += kv.v_ld) {
      const __m256 v0 = _mm256_loadu_ps(vk), v1 = _mm256_loadu_ps(vk + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 weight = _mm256_broadcast_ss(scratch + static_cast<std::size_t>(r0 + r) * max_limit + k);
        acc[r][0] = _mm256_fmadd_ps(weight, v0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(weight, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(tile.out[r0 + r] + c, acc[r][0]);
      _mm256_storeu_ps(tile.out[r0 + r] + c + 8, acc[r][1]);
    }
  }
}

template <int R>
void sub_tile(const AttentionTile& tile, int r0, const KeyValueView& kv, float scale, float* scratch, int max_limit) {
  scores<R>(tile, r0, kv, scale, scratch, max_limit);
  for (int r = r0; r < r0 + R; ++r) {
    float* p = scratch + static_cast<std::size_t>(r) * max_limit;
    softmax_row(p, tile.limit[r]);
    std::fill(p + tile.limit[r], p + max_limit, 0.0f);
    if (tile.initial_key_scale != nullptr && tile.limit[r] > 0) p[0] *= tile.initial_key_scale[r];
    if (tile.probs_out[r] != nullptr) std::memcpy(tile.probs_out[r], p, sizeof(float) * tile.limit[r]);
  }
  weighted_values<R>(tile, r0, kv, scratch, max_limit);
}

void attention(const AttentionTile& tile, const KeyValueView& kv, float scale, float* scratch) {
  if (kv.head_dim % 16 != 0) {
    attention_scalar()(tile, kv, scale, scratch);
    return;
  }
  int max_limit = 0;
  for (int r = 0; r < tile.count; ++r) max_limit = std::max(max_limit, tile.limit[r]);
  int r0 = 0;
  for (; r0 + 4 <= tile.count; r0 += 4) sub_tile<4>(tile, r0, kv, scale, scratch, max_limit);
  switch (tile.count - r0) {
    case 3: sub_tile<3>(tile, r0, kv, scale, scratch, max_limit); break;
    case 2: sub_tile<2>(tile, r0, kv, scale, scratch, max_limit); break;
    case 1: sub_tile<1>(tile, r0, kv, scale, scratch, max_limit); break;
    default: break;
  }
}

}  // namespace

namespace cpu {
AttentionFn attention_avx2() { return &attention; }
}  // namespace cpu

}  // namespace midtune::engine
