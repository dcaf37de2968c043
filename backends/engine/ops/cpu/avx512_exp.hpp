// Vectorised exp for AVX-512 translation units only (exp_coefficients.hpp;
// scalef applies 2^n).
#pragma once

#include <immintrin.h>

#include "backends/engine/ops/cpu/exp_coefficients.hpp"

namespace midtune::engine {

inline __m512 exp_ps(__m512 x) {
  namespace c = exp_coefficients;
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(c::kMin)), _mm512_set1_ps(c::kMax));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(c::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(c::kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(c::kLn2Low), r);
  __m512 p = _mm512_set1_ps(c::kPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kPoly[i]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

}  // namespace midtune::engine
