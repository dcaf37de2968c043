// RoPE in ggml's NORM mode (llama GGUF: the converter permuted Q/K so pairs
// are adjacent): (x[2i], x[2i+1]) rotated by angle_i, for i < rope_dims / 2.
// cos_sin holds rope_dims/2 pairs (cos, sin); the caller builds them from the
// (float, per-head scaled) positions. Bodies: scalar only; dispatch as in
// ops/dispatch.hpp: rope_for picks the body once, since it runs per row.
// rope_dims (even, at most the head size) is checked once, when the model
// loads, not per row.
#pragma once

#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

using RopeFn = void (*)(float* x, const float* cos_sin, int rope_dims);
RopeFn rope_for(Isa isa);

// One row with the scalar body.
void rope_rotate(float* x, const float* cos_sin, int rope_dims);

}  // namespace midtune::engine
