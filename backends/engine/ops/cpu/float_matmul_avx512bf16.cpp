// The float matmul of BF16 weights with the AVX512-BF16 dot product
// (vdpbf16ps), built with -mavx512bf16 and called only after dispatch found
// it (Isa::avx512bf16). A token's activations are rounded to bf16 (nearest
// even) once per call; one instruction then multiplies the 16 rows' weight
// pairs of columns (2j, 2j + 1) by the token's pair and adds both products to
// 16 fp32 accumulators. bf16 x bf16 products are exact in fp32, so the only
// difference to the fp32 body is the activation rounding (a relative 2^-8 per
// value) and the order of the two additions. llama.cpp makes the same choice
// for BF16 weights on such CPUs. Each output is one chain over the pairs in
// order whatever the tile, so prefill and decode agree bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine::cpu {

namespace {

constexpr int kTokens = 12;  // prefill sub-tile: 12 accumulators, 1 weight, 1 broadcast
constexpr int kGroups = 8;   // decode: 8 row groups, 8 independent chains
constexpr std::size_t kPairBytes = 4;

__mmask16 first_lanes(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << std::max(n, 0)) - 1u);
}

// x[0..cols) as bf16 pairs (low half: the even column), the last pair padded
// with zero when cols is odd.
void to_bf16_pairs(const float* x, int cols, std::uint32_t* out) {
  int k = 0;
  for (; k + 32 <= cols; k += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
    _mm512_storeu_si512(out + k / 2, reinterpret_cast<const __m512i&>(v));
  }
  if (k < cols) {
    const int n = cols - k;
    const __m512 low = _mm512_maskz_loadu_ps(first_lanes(n), x + k);
    const __m512 high = _mm512_maskz_loadu_ps(first_lanes(n - 16), x + k + 16);
    const __m512bh v = _mm512_cvtne2ps_pbh(high, low);
    _mm512_mask_storeu_epi32(out + k / 2, first_lanes((n + 1) / 2), reinterpret_cast<const __m512i&>(v));
  }
}

__m512bh weight_pairs(const std::uint8_t* group, int pair) {
  const __m512i v = _mm512_loadu_si512(group + static_cast<std::size_t>(pair) * kPackRows * kPairBytes);
  return reinterpret_cast<const __m512bh&>(v);
}

__m512bh broadcast_pair(std::uint32_t pair) {
  const __m512i v = _mm512_set1_epi32(static_cast<int>(pair));
  return reinterpret_cast<const __m512bh&>(v);
}

void store_rows(float* dst, __m512 acc, int rows) { _mm512_mask_storeu_ps(dst, first_lanes(rows), acc); }

template <int NT>
void tokens_tile(const std::uint8_t* wg, int pairs, const std::uint32_t* xp, std::size_t ldp, float* y,
                 std::size_t ldy, int rows) {
  __m512 acc[NT];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int j = 0; j < pairs; ++j) {
    const __m512bh w = weight_pairs(wg, j);
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_dpbf16_ps(acc[t], w, broadcast_pair(xp[t * ldp + j]));
  }
  for (int t = 0; t < NT; ++t) store_rows(y + t * ldy, acc[t], rows);
}

template <int G>
void token_groups(const FloatMatrix& w, int g0, const std::uint32_t* xp, float* y) {
  __m512 acc[G];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const int pairs = w.stored_cols() / 2;
  for (int j = 0; j < pairs; ++j) {
    const __m512bh xb = broadcast_pair(xp[j]);
    for (int g = 0; g < G; ++g) acc[g] = _mm512_dpbf16_ps(acc[g], weight_pairs(w.group(g0 + g), j), xb);
  }
  for (int g = 0; g < G; ++g) {
    store_rows(y + (g0 + g) * kPackRows, acc[g], std::min(kPackRows, w.rows - (g0 + g) * kPackRows));
  }
}

void tile_avx512bf16(const FloatMatrix& w, int g0, int g1, const float* x, std::size_t ldx, int t0, int t1, float* y,
                     std::size_t ldy) {
  const int pairs = w.stored_cols() / 2;
  const std::size_t ldp = static_cast<std::size_t>(pairs);
  thread_local std::vector<std::uint32_t> xp;
  xp.resize(static_cast<std::size_t>(t1 - t0) * ldp);
  for (int t = t0; t < t1; ++t) {
    to_bf16_pairs(x + static_cast<std::size_t>(t) * ldx, w.cols, xp.data() + static_cast<std::size_t>(t - t0) * ldp);
  }
  int t = t0;
  for (; t + kTokens <= t1; t += kTokens) {
    for (int group = g0; group < g1; ++group) {
      tokens_tile<kTokens>(w.group(group), pairs, xp.data() + static_cast<std::size_t>(t - t0) * ldp, ldp,
                           y + static_cast<std::size_t>(t) * ldy + group * kPackRows, ldy,
                           std::min(kPackRows, w.rows - group * kPackRows));
    }
  }
  for (; t < t1; ++t) {
    const std::uint32_t* xt = xp.data() + static_cast<std::size_t>(t - t0) * ldp;
    float* yt = y + static_cast<std::size_t>(t) * ldy;
    int group = g0;
    for (; group + kGroups <= g1; group += kGroups) token_groups<kGroups>(w, group, xt, yt);
    for (; group < g1; ++group) token_groups<1>(w, group, xt, yt);
  }
}

}  // namespace

FloatTileFn float_tile_avx512bf16() { return &tile_avx512bf16; }

}  // namespace midtune::engine::cpu
