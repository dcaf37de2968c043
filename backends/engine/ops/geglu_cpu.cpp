#include "backends/engine/ops/geglu.hpp"

#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine {

void gelu_tanh_mul(const float* gate, const float* up, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) out[i] = elementwise::gelu_tanh_mul(gate[i], up[i]);
}

GeluMulFn gelu_mul_for(Isa isa) {
  return select_body<GeluMulFn>("geglu", isa, {&gelu_tanh_mul, cpu::gelu_mul_avx2(), nullptr, cpu::gelu_mul_avx512()});
}

}  // namespace midtune::engine
