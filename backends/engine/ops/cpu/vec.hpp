// Vector traits, one small struct per ISA: the primitives the templated SIMD
// bodies (exp.hpp, attention_body.hpp, glu_body.hpp,
// float_matmul_body.hpp) are written in, so
// each body exists once and is instantiated in the per-ISA translation units
// (bodies_avx2.cpp, bodies_avx512.cpp: the only files built with those ISA
// flags). Each struct is defined only when its ISA is enabled for the file.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace midtune::engine::cpu {

#if defined(__AVX2__) && defined(__FMA__)
struct VecAvx2 {
  using reg = __m256;
  static constexpr int kLanes = 8;
  // Queries per attention sub-tile: R x 2 score accumulators, then R x 2
  // value accumulators, with two loaded vectors and a broadcast, must fit in
  // 16 ymm registers (6 queries take 15; more queries per tile share each
  // loaded key more).
  static constexpr int kMaxTileRows = 6;
  // Key vectors per pass of the attention scores: two (a whole 16-key
  // block) share each query broadcast, so the pass is bound by the FMAs, not
  // by the loads (one key load and R broadcasts for R FMAs with one).
  static constexpr int kScoreKeyVectors = 2;

  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float v) { return _mm256_set1_ps(v); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg x) { _mm256_storeu_ps(p, x); }
  // kLanes fp16 values widened to fp32 (exact).
  static reg load_f16(const std::uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // kLanes bf16 values widened to fp32 (exact: the bits move up 16).
  static reg load_bf16(const std::uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // kLanes 32-bit bf16 pairs at p: the low halves and the high halves as fp32
  // (exact).
  static void split_bf16_pairs(const void* p, reg& low, reg& high) {
    const __m256i pairs = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    low = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
    high = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg min(reg a, reg b) { return _mm256_min_ps(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }    // a b + c
  static reg fnmadd(reg a, reg b, reg c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a b
  static reg round_nearest(reg x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // p * 2^n for integral n in [-126, 127]: 2^n built in the exponent bits.
  static reg mul_pow2(reg p, reg n) {
    const __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
  }
  // The first n lanes (1 <= n <= kLanes) from p, the others `fill`.
  static reg load_first(const float* p, int n, float fill) {
    if (n == kLanes) return load(p);
    alignas(32) float lanes[kLanes];
    for (int i = 0; i < kLanes; ++i) lanes[i] = i < n ? p[i] : fill;
    return _mm256_load_ps(lanes);
  }
  static void store_first(float* p, reg x, int n) {
    if (n == kLanes) return store(p, x);
    alignas(32) float lanes[kLanes];
    _mm256_store_ps(lanes, x);
    std::memcpy(p, lanes, sizeof(float) * n);
  }
  static float reduce_max(reg x) {
    alignas(32) float lanes[kLanes];
    _mm256_store_ps(lanes, x);
    float best = lanes[0];
    for (int i = 1; i < kLanes; ++i) best = best < lanes[i] ? lanes[i] : best;
    return best;
  }
  // Horizontal sum of `sum` plus the first n lanes of `tail` (0 <= n <
  // kLanes): lanes in order, then the tail's, as the AVX2 softmax always
  // summed (each ISA keeps its summation order, so its logits stay the same).
  static float sum_with_tail(reg sum, reg tail, int n) {
    alignas(32) float lanes[kLanes];
    _mm256_store_ps(lanes, sum);
    float total = 0.0f;
    for (float v : lanes) total += v;
    _mm256_store_ps(lanes, tail);
    for (int i = 0; i < n; ++i) total += lanes[i];
    return total;
  }
};
#endif

#if defined(__AVX512F__)
struct VecAvx512 {
  using reg = __m512;
  static constexpr int kLanes = 16;
  // R x 2 value accumulators stay in the 32 zmm registers up to 12 queries.
  static constexpr int kMaxTileRows = 12;
  static constexpr int kScoreKeyVectors = 1;  // a zmm holds the whole 16-key block

  static __mmask16 first(int n) {
    return n >= kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
  }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float v) { return _mm512_set1_ps(v); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg x) { _mm512_storeu_ps(p, x); }
  static reg load_f16(const std::uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  // kLanes bf16 values widened to fp32 (exact: the bits move up 16).
  static reg load_bf16(const std::uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static void split_bf16_pairs(const void* p, reg& low, reg& high) {
    const __m512i pairs = _mm512_loadu_si512(p);
    low = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
    high = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_ps(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg fnmadd(reg a, reg b, reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static reg round_nearest(reg x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static reg mul_pow2(reg p, reg n) { return _mm512_scalef_ps(p, n); }
  static reg load_first(const float* p, int n, float fill) { return _mm512_mask_loadu_ps(set1(fill), first(n), p); }
  static void store_first(float* p, reg x, int n) { _mm512_mask_storeu_ps(p, first(n), x); }
  static float reduce_max(reg x) { return _mm512_reduce_max_ps(x); }
  // The tail's lanes join the vector sum before one tree reduction, as the
  // AVX-512 softmax always summed.
  static float sum_with_tail(reg sum, reg tail, int n) {
    return _mm512_reduce_add_ps(_mm512_mask_add_ps(sum, first(n), sum, tail));
  }
};
#endif

}  // namespace midtune::engine::cpu
