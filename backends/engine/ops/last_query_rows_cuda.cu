// CUDA body of last_query_rows.hpp: one thread block per query head. Each
// thread scores some keys (the dot product in double, in the CPU body's
// order), the block reduces the maximum and the sum in double; the scores are
// recomputed rather than stored, the rows are only heads x tokens.
#include <cfloat>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/last_query_rows.hpp"
#include "backends/engine/ops/cuda_reduce.cuh"

namespace midtune::engine::cuda {

namespace {

constexpr int kThreads = 256;

__device__ double score(const float* qkv, std::size_t ld, int tokens, int h, int group, int head_dim,
                        std::size_t k_offset, int j, double inv_sqrt) {
  const float* q = qkv + static_cast<std::size_t>(tokens - 1) * ld + static_cast<std::size_t>(h) * head_dim;
  const float* k = qkv + static_cast<std::size_t>(j) * ld + k_offset + static_cast<std::size_t>(h / group) * head_dim;
  double dot = 0.0;
  for (int i = 0; i < head_dim; ++i) dot += static_cast<double>(q[i]) * k[i];
  return dot * inv_sqrt;
}

__global__ void last_query_rows_kernel(const float* qkv, std::size_t ld, int tokens, int group, int head_dim,
                                       std::size_t k_offset, double inv_sqrt, float* rows) {
  __shared__ double reduce[kThreads];
  const int h = blockIdx.x;
  double top = -DBL_MAX;
  for (int j = threadIdx.x; j < tokens; j += blockDim.x) top = fmax(top, score(qkv, ld, tokens, h, group, head_dim, k_offset, j, inv_sqrt));
  top = block_reduce(top, reduce, MaxOf{});
  double sum = 0.0;
  for (int j = threadIdx.x; j < tokens; j += blockDim.x) sum += exp(score(qkv, ld, tokens, h, group, head_dim, k_offset, j, inv_sqrt) - top);
  sum = block_reduce(sum, reduce, SumOf{});
  for (int j = threadIdx.x; j < tokens; j += blockDim.x) {
    rows[static_cast<std::size_t>(h) * tokens + j] =
        static_cast<float>(exp(score(qkv, ld, tokens, h, group, head_dim, k_offset, j, inv_sqrt) - top) / sum);
  }
}

}  // namespace

void last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads, int head_dim,
                     std::size_t k_offset, float* rows, void* stream) {
  if (tokens <= 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || head_dim <= 0 ||
      k_offset < static_cast<std::size_t>(heads) * head_dim ||
      ld < k_offset + static_cast<std::size_t>(kv_heads) * head_dim) {
    throw std::invalid_argument("last query rows (cuda): " + std::to_string(tokens) + " tokens, heads " +
                                std::to_string(heads) + "/" + std::to_string(kv_heads) + " x " +
                                std::to_string(head_dim) + ", stride " + std::to_string(ld));
  }
  last_query_rows_kernel<<<heads, kThreads, 0, as_stream(stream)>>>(qkv, ld, tokens, heads / kv_heads, head_dim,
                                                                   k_offset, 1.0 / sqrt(static_cast<double>(head_dim)),
                                                                   rows);
  check_launch("last query rows");
}

}  // namespace midtune::engine::cuda
