// CUDA body of merge_attention.hpp: one thread block per row, a thread per
// output element of the row's heads, the weight from elementwise.hpp as the
// host body computes it.
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/merge_attention.hpp"

namespace midtune::engine::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void merge_attention_kernel(float* a, std::size_t a_ld, const float* lse_a, std::size_t lse_a_ld,
                                       const float* b, std::size_t b_ld, const float* lse_b, std::size_t lse_b_ld,
                                       int heads, int head_dim) {
  const int t = blockIdx.x;
  for (int i = threadIdx.x; i < heads * head_dim; i += blockDim.x) {
    const int h = i / head_dim;
    const float w = elementwise::merge_weight(lse_a[static_cast<std::size_t>(h) * lse_a_ld + t],
                                              lse_b[static_cast<std::size_t>(h) * lse_b_ld + t]);
    float& x = a[t * a_ld + i];
    x = elementwise::merged_value(w, x, b[t * b_ld + i]);
  }
}

}  // namespace

void merge_attention(float* a, std::size_t a_ld, const float* lse_a, std::size_t lse_a_ld, const float* b,
                     std::size_t b_ld, const float* lse_b, std::size_t lse_b_ld, int rows, int heads, int head_dim,
                     void* stream) {
  const std::size_t width = static_cast<std::size_t>(heads) * head_dim;
  if (rows < 0 || heads <= 0 || head_dim <= 0 || a_ld < width || b_ld < width ||
      (rows > 0 && (lse_a_ld < static_cast<std::size_t>(rows) || lse_b_ld < static_cast<std::size_t>(rows)))) {
    throw std::invalid_argument("merge attention (cuda): " + std::to_string(rows) + " rows of " +
                                std::to_string(heads) + " x " + std::to_string(head_dim) + ", strides " +
                                std::to_string(a_ld) + "/" + std::to_string(b_ld));
  }
  if (rows == 0) return;
  merge_attention_kernel<<<rows, kThreads, 0, as_stream(stream)>>>(a, a_ld, lse_a, lse_a_ld, b, b_ld, lse_b, lse_b_ld,
                                                                   heads, head_dim);
  check_launch("merge attention");
}

}  // namespace midtune::engine::cuda
