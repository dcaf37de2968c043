// AVX2 activation quantiser: bit-identical to the scalar reference (same
// d = amax / 127, same x * (1 / d) product, vcvtps2dq's round-to-nearest-even
// as nearbyint's default mode). Every matmul input of an integer-quantised
// model passes through it, so on AVX2 the scalar body (a libm nearbyint call
// per element) cost about a tenth of prefill.
#include <immintrin.h>

#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine {

namespace {

inline float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int horizontal_sum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

void quantize_row(const float* x, int cols, std::int8_t* q, float* d, float* s) {
  if (cols % kQuantBlock != 0) {
    quantize_row_scalar()(x, cols, q, d, s);
    return;
  }
  const int blocks = cols / kQuantBlock;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // vpackssdw / vpacksswb interleave the 128-bit lanes; this puts them back.
  const __m256i lane_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int b = 0; b < blocks; ++b, x += kQuantBlock, q += kQuantBlock) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 amax8 = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                                       _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
    const float scale = horizontal_max(amax8) / 127.0f;
    const __m256 inv = _mm256_set1_ps(scale >= kMinQuantScale ? 1.0f / scale : 0.0f);
    __m256i qi[4];
    for (int i = 0; i < 4; ++i) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    // |qi| <= 127, so the saturating packs are exact.
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(bytes, lane_order));
    d[b] = scale;
    s[b] = scale * static_cast<float>(horizontal_sum(sum));
  }
}

}  // namespace

namespace cpu {
QuantizeRowFn quantize_row_avx2() { return &quantize_row; }
}  // namespace cpu

}  // namespace midtune::engine
