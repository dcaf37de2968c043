// AVX-512 activation quantiser: bit-identical to the scalar reference
// (same d = amax / 127, same x * (1 / d) product, round-to-nearest-even).
#include <immintrin.h>

#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine {

namespace {

void quantize_row(const float* x, int cols, std::int8_t* q, float* d, float* s) {
  if (cols % kQuantBlock != 0) {
    quantize_row_scalar()(x, cols, q, d, s);
    return;
  }
  const int blocks = cols / kQuantBlock;
  const __m512 sign_off = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int b = 0; b < blocks; ++b, x += kQuantBlock, q += kQuantBlock) {
    const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(lo, sign_off), _mm512_and_ps(hi, sign_off)));
    const float scale = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(scale >= kMinQuantScale ? 1.0f / scale : 0.0f);
    const __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inv));
    const __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(qhi));
    d[b] = scale;
    s[b] = scale * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi)));
  }
}

}  // namespace

namespace cpu {
QuantizeRowFn quantize_row_avx512() { return &quantize_row; }
}  // namespace cpu

}  // namespace midtune::engine
