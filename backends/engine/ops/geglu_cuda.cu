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

}  // namespace

void gelu_tanh_mul(const float* gate, const float* up, float* out, std::size_t count, void* stream) {
  if (count == 0) return;
  gelu_tanh_mul_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(gate, up, out, count);
  check_launch("geglu");
}

}  // namespace midtune::engine::cuda
