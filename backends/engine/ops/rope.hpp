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

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

using RopeFn = void (*)(float* x, const float* cos_sin, int rope_dims);
RopeFn rope_for(Isa isa, RopePairing pairing = RopePairing::adjacent);

// The tables rope reads, on the host: table k, token t, pair i holds cos and
// sin of (positions[t] / scales[k]) * inverse_frequencies[i]
// (elementwise::rope_cos_sin; the CUDA body is rope_tables in cuda_ops.hpp).
void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                 const double* inverse_frequencies, int pairs, float* cos_sin);

// One row with the scalar bodies.
void rope_rotate(float* x, const float* cos_sin, int rope_dims);         // adjacent pairs
void rope_rotate_halves(float* x, const float* cos_sin, int rope_dims);  // halves

}  // namespace midtune::engine
