#include "backends/engine/ops/swiglu.hpp"

#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine {

namespace {

void silu_mul_reference(const float* gate, const float* up, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) out[i] = elementwise::silu_mul(gate[i], up[i]);
}

}  // namespace

SiluMulFn silu_mul_for(Isa isa) {
  return select_body<SiluMulFn>("swiglu", isa, {&silu_mul_reference, cpu::silu_mul_avx2(), nullptr, cpu::silu_mul_avx512()});
}

void silu_mul(const float* gate, const float* up, float* out, std::size_t count, Isa isa) {
  silu_mul_for(isa)(gate, up, out, count);
}

}  // namespace midtune::engine
