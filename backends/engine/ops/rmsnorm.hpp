// RMSNorm of the Llama block: y = x / sqrt(mean(x^2) + eps) * weight, for
// `rows` rows of `width` (sum of squares in double). Bodies: scalar only
// (O(tokens x width), small next to the matmuls); dispatch as in
// ops/dispatch.hpp. Arguments checked: rows >= 0, width > 0, strides >= width.
// y may be x (in place): each value is read before it is written.
#pragma once

#include <cstddef>

#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/op_target.hpp"

namespace midtune::engine {

void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                   std::size_t ld_y, Isa isa = Isa::scalar);

// LayerNorm (MPT): y = (x - mean) / sqrt(var + eps) * weight + bias (bias
// nullptr: none), mean and variance per row in double
// (elementwise::layer_norm_inverse / layer_norm_scale). Scalar only, for the
// CPU engine and the host reference device; the same argument checks.
void layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows, int width,
                     float eps, float* y, std::size_t ld_y);

// The CUDA bodies (rmsnorm_cuda.cu), on device pointers: one thread block
// per row, or per (token, head) for rms_norm_heads.
namespace cuda {
void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                   std::size_t ld_y, void* stream = nullptr);
void layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows, int width,
                     float eps, float* y, std::size_t ld_y, void* stream = nullptr);
void rms_norm_heads(float* x, std::size_t ld, int tokens, int heads, int head_dim, const float* weight, float eps,
                    void* stream = nullptr);
}  // namespace cuda

// The model's entries (op_target.hpp); on the host, a prefill's rows split
// across threads.
namespace ops {
void rms_norm_rows(const OpTarget& at, const float* x, std::size_t ld_x, const float* weight, int rows, int width,
                   float eps, float* y, std::size_t ld_y);
void layer_norm_rows(const OpTarget& at, const float* x, std::size_t ld_x, const float* weight, const float* bias,
                     int rows, int width, float eps, float* y, std::size_t ld_y);
// RMSNorm of every head, in place (Q/K norm): head h of token t, the
// head_dim values at x + t * ld + h * head_dim, becomes rms_norm_rows of
// that one row with `weight` (head_dim values), for t < tokens, h < heads.
void rms_norm_heads(const OpTarget& at, float* x, std::size_t ld, int tokens, int heads, int head_dim,
                    const float* weight, float eps);
}  // namespace ops

}  // namespace midtune::engine
