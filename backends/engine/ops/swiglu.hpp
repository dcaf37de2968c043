// SwiGLU of the Llama feed-forward block: out = silu(gate) * up,
// silu(g) = g / (1 + exp(-g)), `count` elements. Bodies: scalar (std::exp),
// AVX2 and AVX-512 (one template, polynomial exp, relative error ~1e-7
// against the scalar body); dispatch as in ops/dispatch.hpp.
#pragma once

#include <cstddef>

#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

void silu_mul(const float* gate, const float* up, float* out, std::size_t count, Isa isa = Isa::scalar);

using SiluMulFn = void (*)(const float* gate, const float* up, float* out, std::size_t count);
SiluMulFn silu_mul_for(Isa isa);  // the dispatch rule of ops/dispatch.hpp

}  // namespace midtune::engine
