// The SIMD bodies of the gated feed-forward activations, once for every ISA
// (V: vec.hpp traits). Both gates have the form g / (1 + exp(-z(g))):
//   SwiGLU: silu(g) = g / (1 + exp(-g)), z(g) = g;
//   GeGLU:  gelu(g) = 0.5 g (1 + tanh(k (g + c g^3))) = g / (1 + exp(-2 k g (1 + c g^2)))
//           (1 + tanh(u) = 2 / (1 + exp(-2u)), so no tanh and no cancellation
//           near g = 0), k = sqrt(2/pi), c = 0.044715.
// out = gate(g) * up, `count` elements. Included only by the per-ISA
// translation units.
#pragma once

#include <algorithm>
#include <cstddef>

#include "backends/engine/ops/cpu/exp.hpp"

namespace midtune::engine::cpu {

template <class V, class Exponent>
void gated_body(const float* gate, const float* up, float* out, std::size_t count, Exponent z) {
  const typename V::reg one = V::set1(1.0f);
  for (std::size_t i = 0; i < count; i += V::kLanes) {
    const int n = static_cast<int>(std::min<std::size_t>(V::kLanes, count - i));
    const typename V::reg g = V::load_first(gate + i, n, 0.0f);
    const typename V::reg u = V::load_first(up + i, n, 0.0f);
    const typename V::reg gated = V::div(g, V::add(one, exp_ps<V>(V::sub(V::zero(), z(g)))));
    V::store_first(out + i, V::mul(gated, u), n);
  }
}

template <class V>
void silu_mul_body(const float* gate, const float* up, float* out, std::size_t count) {
  gated_body<V>(gate, up, out, count, [](typename V::reg g) { return g; });
}

template <class V>
void gelu_mul_body(const float* gate, const float* up, float* out, std::size_t count) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.79788456080286535587989211986876f;
  constexpr float kCubic = 0.044715f;
  gated_body<V>(gate, up, out, count, [](typename V::reg g) {
    const typename V::reg inner = V::fmadd(V::mul(V::set1(kCubic), g), g, V::set1(1.0f));
    return V::mul(V::mul(V::set1(kTwoSqrt2OverPi), g), inner);
  });
}

}  // namespace midtune::engine::cpu
