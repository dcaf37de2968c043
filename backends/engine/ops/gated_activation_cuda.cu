// CUDA body of gated_activation.hpp (declared there): one thread per
// element, elementwise.hpp's silu_mul / gelu_tanh_mul as the CPU reference
// uses them.
#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/gated_activation.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

namespace {

struct Silu {
  __device__ float operator()(float gate, float up) const { return elementwise::silu_mul(gate, up); }
};
struct GeluTanh {
  __device__ float operator()(float gate, float up) const { return elementwise::gelu_tanh_mul(gate, up); }
};

template <class Act>
__global__ void gated_rows_kernel(const float* gate, const float* up, std::size_t ld_in, int width, float* out,
                                  std::size_t ld_out, std::size_t count, Act act) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::size_t r = i / static_cast<std::size_t>(width), c = i % static_cast<std::size_t>(width);
  out[r * ld_out + c] = act(gate[r * ld_in + c], up != nullptr ? up[r * ld_in + c] : 1.0f);
}

}  // namespace

void gated_activation_rows(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in, int rows,
                           int width, float* out, std::size_t ld_out, void* stream) {
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
  if (count == 0) return;
  if (activation == FfnActivation::gelu_tanh) {
    gated_rows_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(gate, up, ld_in, width, out,
                                                                                     ld_out, count, GeluTanh{});
  } else {
    gated_rows_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(gate, up, ld_in, width, out,
                                                                                     ld_out, count, Silu{});
  }
  check_launch("gated activation rows");
}

}  // namespace midtune::engine::cuda
