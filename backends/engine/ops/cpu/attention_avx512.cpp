// AVX-512 attention tile: scores for 16 keys per FMA chain over the
// transposed keys, a vectorised exp (Cephes polynomial, ~1 ulp, scalef for
// 2^n), and p V with the tile's queries sharing each value-row load.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/cpu/avx512_exp.hpp"

namespace midtune::engine {

namespace {

inline __mmask16 tail_mask(int remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << remaining) - 1u);
}

template <int R>
void scores(const AttentionTile& tile, const KeyValueView& kv, float scale, float* scratch,
            int max_limit) {
  for (int k0 = 0; k0 < max_limit; k0 += 16) {
    const __mmask16 mask = tail_mask(max_limit - k0);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const float* block = kv.kt + static_cast<std::size_t>(k0) * kv.head_dim;  // k0 / 16 * head_dim * 16
    for (int i = 0; i < kv.head_dim; ++i) {
      const __m512 keys = _mm512_maskz_loadu_ps(mask, block + i * kKeyBlock);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(tile.q[r][i]), keys, acc[r]);
    }
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(scratch + static_cast<std::size_t>(r) * max_limit + k0, mask,
                            _mm512_mul_ps(acc[r], _mm512_set1_ps(scale)));
    }
  }
}

void softmax_row(float* p, int limit) {
  __m512 best = _mm512_set1_ps(-3.0e38f);
  for (int k = 0; k < limit; k += 16) {
    best = _mm512_mask_max_ps(best, tail_mask(limit - k), best, _mm512_maskz_loadu_ps(tail_mask(limit - k), p + k));
  }
  const __m512 max_all = _mm512_set1_ps(_mm512_reduce_max_ps(best));
  __m512 sum = _mm512_setzero_ps();
  for (int k = 0; k < limit; k += 16) {
    const __mmask16 mask = tail_mask(limit - k);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, p + k), max_all));
    sum = _mm512_mask_add_ps(sum, mask, sum, e);
    _mm512_mask_storeu_ps(p + k, mask, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int k = 0; k < limit; k += 16) {
    const __mmask16 mask = tail_mask(limit - k);
    _mm512_mask_storeu_ps(p + k, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, p + k), inv));
  }
}

template <int R>
void weighted_values(const AttentionTile& tile, const KeyValueView& kv, const float* scratch,
                     int max_limit) {
  // Rows shorter than max_limit have zero weights past their limit (set by
  // the caller), so every query can run over the same key range. 32 output
  // dims per pass: R x 2 accumulators stay in registers for R <= 12.
  for (int c = 0; c < kv.head_dim; c += 32) {
    const bool two = kv.head_dim - c >= 32;
    __m512 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float* vk = kv.v + c;
    for (int k = 0; k < max_limit; ++k, vk += kv.v_ld) {
      const __m512 v0 = _mm512_loadu_ps(vk);
      const __m512 v1 = two ? _mm512_loadu_ps(vk + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512 weight = _mm512_set1_ps(scratch[static_cast<std::size_t>(r) * max_limit + k]);
        acc[r][0] = _mm512_fmadd_ps(weight, v0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(weight, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(tile.out[r] + c, acc[r][0]);
      if (two) _mm512_storeu_ps(tile.out[r] + c + 16, acc[r][1]);
    }
  }
}

template <int R>
void attend(const AttentionTile& tile, const KeyValueView& kv, float scale, float* scratch) {
  int max_limit = 0;
  for (int r = 0; r < R; ++r) max_limit = std::max(max_limit, tile.limit[r]);
  scores<R>(tile, kv, scale, scratch, max_limit);
  for (int r = 0; r < R; ++r) {
    float* p = scratch + static_cast<std::size_t>(r) * max_limit;
    softmax_row(p, tile.limit[r]);
    std::fill(p + tile.limit[r], p + max_limit, 0.0f);
    if (tile.initial_key_scale != nullptr && tile.limit[r] > 0) p[0] *= tile.initial_key_scale[r];
    if (tile.probs_out[r] != nullptr) std::memcpy(tile.probs_out[r], p, sizeof(float) * tile.limit[r]);
  }
  weighted_values<R>(tile, kv, scratch, max_limit);
}

void attention(const AttentionTile& tile, const KeyValueView& kv, float scale, float* scratch) {
  if (kv.head_dim % 16 != 0) {
    attention_scalar()(tile, kv, scale, scratch);
    return;
  }
  switch (tile.count) {
    case 1: attend<1>(tile, kv, scale, scratch); break;
    case 2: attend<2>(tile, kv, scale, scratch); break;
    case 3: attend<3>(tile, kv, scale, scratch); break;
    case 4: attend<4>(tile, kv, scale, scratch); break;
    case 5: attend<5>(tile, kv, scale, scratch); break;
    case 6: attend<6>(tile, kv, scale, scratch); break;
    case 7: attend<7>(tile, kv, scale, scratch); break;
    case 8: attend<8>(tile, kv, scale, scratch); break;
    case 9: attend<9>(tile, kv, scale, scratch); break;
    case 10: attend<10>(tile, kv, scale, scratch); break;
    case 11: attend<11>(tile, kv, scale, scratch); break;
    default: attend<12>(tile, kv, scale, scratch); break;
  }
}

}  // namespace

namespace cpu {
AttentionFn attention_avx512() { return &attention; }
}  // namespace cpu

}  // namespace midtune::engine
