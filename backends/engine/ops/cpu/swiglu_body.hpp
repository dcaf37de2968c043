// The SIMD SwiGLU body, once for every ISA (V: vec.hpp traits):
// silu(g) * u = g / (1 + exp(-g)) * u. Included only by the per-ISA
// translation units.
#pragma once

#include <algorithm>
#include <cstddef>

#include "backends/engine/ops/cpu/exp.hpp"

namespace midtune::engine::cpu {

template <class V>
void silu_mul_body(const float* gate, const float* up, float* out, std::size_t count) {
  const typename V::reg one = V::set1(1.0f);
  for (std::size_t i = 0; i < count; i += V::kLanes) {
    const int n = static_cast<int>(std::min<std::size_t>(V::kLanes, count - i));
    const typename V::reg g = V::load_first(gate + i, n, 0.0f);
    const typename V::reg u = V::load_first(up + i, n, 0.0f);
    const typename V::reg silu = V::div(g, V::add(one, exp_ps<V>(V::sub(V::zero(), g))));
    V::store_first(out + i, V::mul(silu, u), n);
  }
}

}  // namespace midtune::engine::cpu
