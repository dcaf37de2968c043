// CUDA body of geglu.hpp (contract: cuda_ops.hpp): one thread per element,
// elementwise.hpp's gelu_tanh_mul as the CPU reference uses it.
#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

namespace {

__global__ void gelu_tanh_mul_kernel(const float* gate, const float* up, float* out, std::size_t count) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = elementwise::gelu_tanh_mul(gate[i], up[i]);
}

// Rows of `width` elements, gate and up rows `ld_in` apart (a fused gate|up
// product's output), out rows `ld_out` apart.
__global__ void gelu_tanh_mul_rows_kernel(const float* gate, const float* up, std::size_t ld_in, int width, float* out,
                               std::size_t ld_out, std::size_t count) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const std::size_t r = i / width, c = i % width;
  out[r * ld_out + c] = elementwise::gelu_tanh_mul(gate[r * ld_in + c], up != nullptr ? up[r * ld_in + c] : 1.0f);
}

}  // namespace

void gelu_tanh_mul(const float* gate, const float* up, float* out, std::size_t count, void* stream) {
  if (count == 0) return;
  gelu_tanh_mul_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(gate, up, out, count);
  check_launch("geglu");
}

void gelu_tanh_mul_rows(const float* gate, const float* up, std::size_t ld_in, int rows, int width, float* out,
                   std::size_t ld_out, void* stream) {
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
  if (count == 0) return;
  gelu_tanh_mul_rows_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(gate, up, ld_in, width, out, ld_out,
                                                                                 count);
  check_launch("gelu_tanh_mul rows");
}

}  // namespace midtune::engine::cuda
