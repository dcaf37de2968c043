// Row-wise float ops of the Llama block (scalar; O(tokens x width), a small
// share of the time next to the matmuls and attention).
#pragma once

#include <cstddef>

#include "backends/engine/kernels/cpu_features.hpp"

namespace midtune::engine {

// y = x / sqrt(mean(x^2) + eps) * weight, for `rows` rows of `width`.
void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width,
                   float eps, float* y, std::size_t ld_y);

// RoPE in ggml's NORM mode (llama GGUF: the converter permuted Q/K so pairs
// are adjacent): (x[2i], x[2i+1]) rotated by angle_i, for i < rope_dims / 2.
// cos_sin holds rope_dims/2 pairs (cos, sin).
void rope_rotate(float* x, const float* cos_sin, int rope_dims);

// out = silu(gate) * up  (SwiGLU), `count` elements. The AVX-512 path uses a
// polynomial exp (relative error ~1e-7 against the scalar std::exp path).
void silu_mul(const float* gate, const float* up, float* out, std::size_t count, Isa isa = Isa::scalar);

using SiluMulFn = void (*)(const float* gate, const float* up, float* out, std::size_t count);
SiluMulFn silu_mul_avx512();  // nullptr when not compiled in

}  // namespace midtune::engine
