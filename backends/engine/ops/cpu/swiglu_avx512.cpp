// AVX-512 SwiGLU: silu(g) * u = g / (1 + exp(-g)) * u.
#include <immintrin.h>

#include "backends/engine/ops/cpu/avx512_exp.hpp"
#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine {

namespace {

void silu_mul_vec(const float* gate, const float* up, float* out, std::size_t count) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (std::size_t i = 0; i < count; i += 16) {
    const __mmask16 mask = count - i >= 16 ? static_cast<__mmask16>(0xffff)
                                           : static_cast<__mmask16>((1u << (count - i)) - 1u);
    const __m512 g = _mm512_maskz_loadu_ps(mask, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(mask, up + i);
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(out + i, mask, _mm512_mul_ps(silu, u));
  }
}

}  // namespace

namespace cpu {
SiluMulFn silu_mul_avx512() { return &silu_mul_vec; }
SiluMulFn silu_mul_avx2() { return nullptr; }  // see ops/swiglu.hpp
}  // namespace cpu

}  // namespace midtune::engine
