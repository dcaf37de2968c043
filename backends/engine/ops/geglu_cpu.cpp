#include "backends/engine/ops/geglu.hpp"

#include <cmath>

namespace midtune::engine {

void gelu_tanh_mul(const float* gate, const float* up, float* out, std::size_t count) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCubic = 0.044715f;
  for (std::size_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kCubic * g * g))) * up[i];
  }
}

GeluMulFn gelu_mul_for(Isa isa) { return select_body<GeluMulFn>("geglu", isa, {&gelu_tanh_mul, nullptr, nullptr}); }

}  // namespace midtune::engine
