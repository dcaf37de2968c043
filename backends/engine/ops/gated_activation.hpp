// The gated feed-forward activation: out = act(gate) * up, with act
//   FfnActivation::silu       SwiGLU (llama, qwen2): silu(g) = g / (1 + exp(-g))
//   FfnActivation::gelu_tanh  GeGLU (gemma): gelu in its tanh approximation
//                             gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
//                             as llama.cpp's ggml_gelu (which, on CPU, reads it
//                             from a table indexed by g rounded to fp16; these
//                             bodies compute it in float).
// Bodies: the scalar reference (elementwise.hpp's silu_mul and gelu_tanh_mul,
// which the CUDA body evaluates too), AVX2 and AVX-512 (one template,
// ops/cpu/glu_body.hpp, polynomial exp, ~1e-7 relative to the scalar body);
// dispatch as in ops/dispatch.hpp. CUDA body: gated_activation_cuda.cu.
#pragma once

#include <cstddef>

#include "backends/engine/gguf/ffn_activation.hpp"
#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/op_target.hpp"

namespace midtune::engine {

// `count` elements of one row.
using GatedMulFn = void (*)(const float* gate, const float* up, float* out, std::size_t count);
GatedMulFn gated_mul_for(FfnActivation activation, Isa isa);

// By rows: out[r][c] = act(gate[r][c]) * up[r][c] for r < rows, c < width,
// gate and up rows ld_in apart, out rows ld_out apart; up nullptr: act alone
// (the ungated feed-forward of mpt), computed as a product with ones, which
// is exact. One thread: a device splits the rows between its threads.
void gated_activation_rows(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in, int rows,
                           int width, float* out, std::size_t ld_out, Isa isa);

namespace cuda {
void gated_activation_rows(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in, int rows,
                           int width, float* out, std::size_t ld_out, void* stream = nullptr);
}  // namespace cuda

// The model's entry (op_target.hpp): gated_activation_rows; on the host, a
// prefill's rows split across threads.
namespace ops {
void gated_activation(const OpTarget& at, FfnActivation activation, const float* gate, const float* up,
                      std::size_t ld_in, int rows, int width, float* out, std::size_t ld_out);
}  // namespace ops

}  // namespace midtune::engine
