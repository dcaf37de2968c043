// GeGLU of the Gemma feed-forward block: out = gelu(gate) * up, `count`
// elements, gelu in its tanh approximation
//   gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
// as llama.cpp's ggml_gelu (which, on CPU, reads it from a table indexed by
// g rounded to fp16; these bodies compute it in float). Bodies: scalar
// (tanhf), AVX2 and AVX-512 (one template, ops/cpu/glu_body.hpp: the same
// function as g / (1 + exp(-2u)) with the polynomial exp, ~1e-7 relative to
// the scalar body); dispatch as in ops/dispatch.hpp.
#pragma once

#include <cstddef>

#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

using GeluMulFn = void (*)(const float* gate, const float* up, float* out, std::size_t count);
GeluMulFn gelu_mul_for(Isa isa);

void gelu_tanh_mul(const float* gate, const float* up, float* out, std::size_t count);

}  // namespace midtune::engine
