// CUDA body of the token embedding of the batched engine (contract:
// devices/device_ops.hpp): one thread per output element, rows gathered from
// the fp32 table and scaled as the CPU model scales them (gemma: sqrt(hidden)).
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"

namespace midtune::engine::cuda {

namespace {

__global__ void embed_kernel(const float* table, int width, const std::int32_t* tokens, std::size_t total,
                             float scale, float* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const std::size_t t = i / width, k = i % width;
  const float value = table[static_cast<std::size_t>(tokens[t]) * width + k];
  out[i] = scale == 1.0f ? value : value * scale;
}

}  // namespace

void embed(const float* table, int width, const std::int32_t* tokens, int count, float scale, float* out,
           void* stream) {
  if (width <= 0 || count < 0) {
    throw std::invalid_argument("embed (cuda): " + std::to_string(count) + " tokens of width " + std::to_string(width));
  }
  const std::size_t total = static_cast<std::size_t>(count) * width;
  if (total == 0) return;
  embed_kernel<<<blocks_for(total), kThreadsPerBlock, 0, as_stream(stream)>>>(table, width, tokens, total, scale, out);
  check_launch("embed");
}

}  // namespace midtune::engine::cuda
