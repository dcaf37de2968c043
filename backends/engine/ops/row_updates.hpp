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
// and the plain sums: a bias on every row, a residual.
// SIW's correction reads the KV cache, so each device applies it
// (Device::add_key0_correction); the others are ops over rows (ops:: below).
#pragma once

#include <cstddef>

#include "backends/engine/ops/op_target.hpp"

namespace midtune::engine {

void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, int group, int head_dim,
                         const float* key0_weight, std::size_t key0_ld, const float* factors, const float* v0,
                         std::size_t v0_stride);

void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width, const float* normed,
                        std::size_t normed_ld, int channel, double scale, const float* column);

void cap_values(float* x, std::size_t count, float cap, bool soft);

// The CUDA bodies (row_updates_cuda.cu); SIW's is in cuda_ops.hpp with the
// GPU family's other kernels over its cache.
namespace cuda {
void add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width, void* stream = nullptr);
void add(float* x, const float* y, std::size_t count, void* stream = nullptr);
void cap_values(float* x, std::size_t count, float cap, bool soft, void* stream = nullptr);
void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width, const float* normed,
                        std::size_t normed_ld, int channel, double scale, const float* column, void* stream = nullptr);
}  // namespace cuda

// The model's entries (op_target.hpp).
namespace ops {
// x[r][i] += v[i] for r < rows, i < width (biases).
void add_row_vector(const OpTarget& at, float* x, std::size_t ld_x, int rows, const float* v, int width);
// x[i] += y[i] (residuals).
void add(const OpTarget& at, float* x, const float* y, std::size_t count);
void cap_values(const OpTarget& at, float* x, std::size_t count, float cap, bool soft);
void add_channel_column(const OpTarget& at, float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                        const float* normed, std::size_t normed_ld, int channel, double scale, const float* column);
}  // namespace ops

}  // namespace midtune::engine
