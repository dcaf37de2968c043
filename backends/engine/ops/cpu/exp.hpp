// Vectorised exp for every SIMD body (one body, instantiated per ISA with
// the traits of vec.hpp): exp(x) = 2^n p(r), constants and error in
// exp_coefficients.hpp.
#pragma once

#include "backends/engine/ops/cpu/exp_coefficients.hpp"

namespace midtune::engine::cpu {

template <class V>
typename V::reg exp_ps(typename V::reg x) {
  namespace c = exp_coefficients;
  x = V::min(V::max(x, V::set1(c::kMin)), V::set1(c::kMax));
  const typename V::reg n = V::round_nearest(V::mul(x, V::set1(c::kLog2e)));
  typename V::reg r = V::fnmadd(n, V::set1(c::kLn2High), x);
  r = V::fnmadd(n, V::set1(c::kLn2Low), r);
  typename V::reg p = V::set1(c::kPoly[0]);
  for (int i = 1; i < 6; ++i) p = V::fmadd(p, r, V::set1(c::kPoly[i]));
  p = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  return V::mul_pow2(p, n);
}

}  // namespace midtune::engine::cpu
