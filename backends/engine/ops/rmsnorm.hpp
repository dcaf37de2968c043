// RMSNorm of the Llama block: y = x / sqrt(mean(x^2) + eps) * weight, for
// `rows` rows of `width` (sum of squares in double). Bodies: scalar only
// (O(tokens x width), small next to the matmuls); dispatch as in
// ops/dispatch.hpp. Arguments checked: rows >= 0, width > 0, strides >= width.
// y may be x (in place): each value is read before it is written.
#pragma once

#include <cstddef>

#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                   std::size_t ld_y, Isa isa = Isa::scalar);

// LayerNorm (MPT): y = (x - mean) / sqrt(var + eps) * weight + bias (bias
// nullptr: none), mean and variance per row in double
// (elementwise::layer_norm_inverse / layer_norm_scale). Scalar only, for the
// CPU engine and the host reference device; the same argument checks.
void layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows, int width,
                     float eps, float* y, std::size_t ld_y);

}  // namespace midtune::engine
