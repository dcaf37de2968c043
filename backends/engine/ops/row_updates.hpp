// In-place row updates of two method mechanisms, CPU bodies (the CUDA ones
// are in row_updates_cuda.cu):
//   SIW:  out[t][h] += (factors[t] - 1) * key0_weight[h * key0_ld + t] * v0(h)
//         for t < tokens, v0(h) = v0 + (h / group) * v0_stride (key 0's value
//         row of the head's KV head); a factor of 1 leaves the row alone.
//   PHS (eq. 2 by linearity): rows[t][offset + i] +=
//         channel_delta(scale, normed[t][channel]) * column[i], t < tokens, i < width.
// and of two architectures' bounds on values (elementwise::cap_value):
//   x[i] = cap * tanh(x[i] / cap) (soft, gemma2's final logits) or x[i]
//         clamped to [-cap, cap] (MPT's clamp_kqv), i < count.
// Used by the CPU model and the batched engine's host reference device.
#pragma once

#include <cstddef>

namespace midtune::engine {

void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, int group, int head_dim,
                         const float* key0_weight, std::size_t key0_ld, const float* factors, const float* v0,
                         std::size_t v0_stride);

void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width, const float* normed,
                        std::size_t normed_ld, int channel, double scale, const float* column);

void cap_values(float* x, std::size_t count, float cap, bool soft);

}  // namespace midtune::engine
