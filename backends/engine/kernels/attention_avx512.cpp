// AVX-512 attention tile: scores for 16 keys per FMA chain over the
// transposed keys, a vectorised exp (Cephes polynomial, ~1 ulp, scalef for
// 2^n), and p V with the tile's queries sharing each value-row load.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/engine/kernels/attention.hpp"
#include "backends/engine/kernels/avx512_exp.hpp"

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
    const float* col = kv.kt + k0;
    for (int i = 0; i < kv.head_dim; ++i) {
      const __m512 keys = _mm512_maskz_loadu_ps(mask, col + i * kv.kt_ld);
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
  // the caller), so every query can run over the same key range.
  for (int c = 0; c < kv.head_dim; c += 64) {
    const int width = std::min(64, kv.head_dim - c);
    const int vecs = width / 16;
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
    for (int k = 0; k < max_limit; ++k) {
      const float* vk = kv.v + static_cast<std::size_t>(k) * kv.v_ld + c;
      __m512 values[4];
      for (int j = 0; j < vecs; ++j) values[j] = _mm512_loadu_ps(vk + 16 * j);
      for (int r = 0; r < R; ++r) {
        const __m512 weight = _mm512_set1_ps(scratch[static_cast<std::size_t>(r) * max_limit + k]);
        for (int j = 0; j < vecs; ++j) acc[r][j] = _mm512_fmadd_ps(weight, values[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < vecs; ++j) _mm512_storeu_ps(tile.out[r] + c + 16 * j, acc[r][j]);
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
    default: attend<4>(tile, kv, scale, scratch); break;
  }
}

}  // namespace

AttentionFn attention_avx512() { return &attention; }

}  // namespace midtune::engine
