// CUDA body of rmsnorm.hpp (contract: cuda_ops.hpp). One block per row: each
// thread sums a strided part of the squares in double, the block reduces them
// in shared memory, then every thread scales its part with elementwise.hpp's
// functions, as the CPU reference does.
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

namespace {

__global__ void rms_norm_kernel(const float* x, std::size_t ld_x, const float* weight, int width, float eps, float* y,
                                std::size_t ld_y) {
  __shared__ double partial[kThreadsPerBlock];
  const float* xr = x + blockIdx.x * ld_x;
  float* yr = y + blockIdx.x * ld_y;
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

}  // namespace

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

}  // namespace midtune::engine::cuda
