// CUDA bodies of rmsnorm.hpp (declared there). One block per row:
// each thread sums a strided part of the squares in double, the block
// reduces them in shared memory, then every thread scales its part with
// elementwise.hpp's functions, as the CPU reference does. A thread writes
// only the values it read, so a row may be normed in place (the per-head
// Q/K norm).
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

namespace {

// One row by the whole block; `partial` is the block's shared scratch.
__device__ void rms_norm_block_row(const float* xr, const float* weight, int width, float eps, float* yr,
                                   double* partial) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < width; i += blockDim.x) sum += static_cast<double>(xr[i]) * xr[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float inverse = elementwise::rms_inverse(partial[0], width, eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x) yr[i] = elementwise::rms_scale(xr[i], inverse, weight[i]);
}

__global__ void rms_norm_kernel(const float* x, std::size_t ld_x, const float* weight, int width, float eps, float* y,
                                std::size_t ld_y) {
  __shared__ double partial[kThreadsPerBlock];
  rms_norm_block_row(x + blockIdx.x * ld_x, weight, width, eps, y + blockIdx.x * ld_y, partial);
}

// Block b: head b % heads of token b / heads, in place.
__global__ void rms_norm_heads_kernel(float* x, std::size_t ld, int heads, int head_dim, const float* weight,
                                      float eps) {
  __shared__ double partial[kThreadsPerBlock];
  float* head = x + (blockIdx.x / heads) * ld + static_cast<std::size_t>(blockIdx.x % heads) * head_dim;
  rms_norm_block_row(head, weight, head_dim, eps, head, partial);
}

// LayerNorm of row blockIdx.x: the mean, then the centred sum of squares,
// each reduced in double as rms_norm_block_row's sum.
__global__ void layer_norm_kernel(const float* x, std::size_t ld_x, const float* weight, const float* bias, int width,
                                  float eps, float* y, std::size_t ld_y) {
  __shared__ double partial[kThreadsPerBlock];
  const float* xr = x + blockIdx.x * ld_x;
  float* yr = y + blockIdx.x * ld_y;
  const auto block_sum = [&](double value) {
    partial[threadIdx.x] = value;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    const double total = partial[0];
    __syncthreads();  // partial[] is reused by the next sum
    return total;
  };
  double sum = 0.0;
  for (int i = threadIdx.x; i < width; i += blockDim.x) sum += xr[i];
  const float mean = static_cast<float>(block_sum(sum) / width);
  double squares = 0.0;
  for (int i = threadIdx.x; i < width; i += blockDim.x) squares += static_cast<double>(xr[i] - mean) * (xr[i] - mean);
  const float inverse = elementwise::layer_norm_inverse(block_sum(squares), width, eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    yr[i] = elementwise::layer_norm_scale(xr[i], mean, inverse, weight[i], bias != nullptr ? bias[i] : 0.0f);
  }
}

}  // namespace

void layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows, int width,
                     float eps, float* y, std::size_t ld_y, void* stream) {
  if (rows < 0 || width <= 0 || ld_x < static_cast<std::size_t>(width) || ld_y < static_cast<std::size_t>(width)) {
    throw std::invalid_argument("layernorm (cuda): " + std::to_string(rows) + " rows of " + std::to_string(width) +
                                " with strides " + std::to_string(ld_x) + ", " + std::to_string(ld_y));
  }
  if (rows == 0) return;
  layer_norm_kernel<<<rows, kThreadsPerBlock, 0, as_stream(stream)>>>(x, ld_x, weight, bias, width, eps, y, ld_y);
  check_launch("layernorm");
}

void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                   std::size_t ld_y, void* stream) {
  if (rows < 0 || width <= 0 || ld_x < static_cast<std::size_t>(width) || ld_y < static_cast<std::size_t>(width)) {
    throw std::invalid_argument("rmsnorm (cuda): " + std::to_string(rows) + " rows of " + std::to_string(width) +
                                " with strides " + std::to_string(ld_x) + ", " + std::to_string(ld_y));
  }
  if (rows == 0) return;
  rms_norm_kernel<<<rows, kThreadsPerBlock, 0, as_stream(stream)>>>(x, ld_x, weight, width, eps, y, ld_y);
  check_launch("rmsnorm");
}

void rms_norm_heads(float* x, std::size_t ld, int tokens, int heads, int head_dim, const float* weight, float eps,
                    void* stream) {
  if (tokens < 0 || heads <= 0 || head_dim <= 0 || ld < static_cast<std::size_t>(heads) * head_dim) {
    throw std::invalid_argument("rmsnorm heads (cuda): " + std::to_string(tokens) + " rows of " +
                                std::to_string(heads) + " heads of " + std::to_string(head_dim) + " with stride " +
                                std::to_string(ld));
  }
  if (tokens == 0) return;
  rms_norm_heads_kernel<<<tokens * heads, kThreadsPerBlock, 0, as_stream(stream)>>>(x, ld, heads, head_dim, weight,
                                                                                    eps);
  check_launch("rmsnorm heads");
}

}  // namespace midtune::engine::cuda
