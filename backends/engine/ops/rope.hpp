// RoPE: each of the rope_dims/2 dimension pairs i of a row rotated by
// angle_i. cos_sin holds rope_dims/2 pairs (cos, sin); the caller builds them
// from the (float, per-head scaled) positions and the model's frequencies.
// Which dimensions form pair i is the architecture's (RopePairing, llama.cpp's
// rope type):
//   adjacent (ggml NORM; llama GGUFs, whose converter permuted Q/K for it):
//            (x[2i], x[2i+1])
//   halves   (ggml NEOX; qwen2, gemma): (x[i], x[i + rope_dims/2])
// Dimensions from rope_dims on are left as they are. Bodies: scalar only;
// dispatch as in ops/dispatch.hpp: rope_for picks the body once, since it
// runs per row. rope_dims (even, at most the head size) is checked once, when
// the model loads, not per row.
#pragma once

#include <cstddef>

#include "backends/engine/gguf/rope_pairing.hpp"
#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/op_target.hpp"

namespace midtune::engine {

using RopeFn = void (*)(float* x, const float* cos_sin, int rope_dims);
RopeFn rope_for(Isa isa, RopePairing pairing = RopePairing::adjacent);

// The tables rope reads, on the host: table k, token t, pair i holds cos and
// sin of (positions[t] / scales[k]) * inverse_frequencies[i]
// (elementwise::rope_cos_sin).
void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                 const double* inverse_frequencies, int pairs, float* cos_sin);

// One row with the scalar bodies.
void rope_rotate(float* x, const float* cos_sin, int rope_dims);         // adjacent pairs
void rope_rotate_halves(float* x, const float* cos_sin, int rope_dims);  // halves

// The CUDA bodies (rope_cuda.cu), on device pointers, the angles in double
// as on the host.
namespace cuda {
void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                 const double* inverse_frequencies, int pairs, float* cos_sin, void* stream = nullptr);
void rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims, RopePairing pairing,
               const float* cos_sin, std::size_t head_table_stride, void* stream = nullptr);
}  // namespace cuda

// The model's entries (op_target.hpp).
namespace ops {
// Table k, token t, pair i holds cos and sin of (positions[t] / scales[k])
// * inverse_frequencies[i], pairs = rope_dims / 2.
void rope_tables(const OpTarget& at, const double* positions, int tokens, const float* scales, int tables,
                 const double* inverse_frequencies, int pairs, float* cos_sin);
// RoPE in place on `tokens` rows of x (rows ld_x apart), each of `heads`
// heads of head_dim values: head h of row t rotated with the table entry
// cos_sin + h * head_table_stride + t * rope_dims (stride 0: one table for
// every head). rope_dims 0 rotates nothing (a model without RoPE, MPT).
void rope_rows(const OpTarget& at, float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims,
               RopePairing pairing, const float* cos_sin, std::size_t head_table_stride);
}  // namespace ops

}  // namespace midtune::engine
