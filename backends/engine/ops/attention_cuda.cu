// CUDA body of attention.hpp (contract: cuda_ops.hpp) for few queries (a
// decode step). One thread block per (query, head): the query in shared
// memory, the visible keys taken in chunks. Per chunk each warp scores every
// kWarps-th key (its lanes split the head's dimensions, so a key row is read
// whole by one warp), the block finds the chunk's maximum, each key's weight
// is computed once, the running sum and output are rescaled (the running-
// maximum softmax of FlashAttention, without tiling over queries), and each
// warp accumulates its keys' weighted value rows in registers, lane d owning
// dimensions d, d + 32, ...; the warps' partial outputs are summed at the
// end. The CPU bodies take the exact maximum first; the results agree to
// float rounding.
#include <cfloat>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/cuda_reduce.cuh"

namespace midtune::engine::cuda {

namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kKeyChunk = 1024;
constexpr int kWarpSize = 32;
constexpr int kWarps = 8;
constexpr int kAttentionThreads = kWarps * kWarpSize;
constexpr int kDimsPerLane = kMaxHeadDim / kWarpSize;

__device__ float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__global__ void attention_kernel(const float* q, std::size_t q_ld, const float* keys, const float* values,
                                 std::size_t kv_ld, int tokens, int past, int heads, int group, int head_dim,
                                 int window, float scale, elementwise::ScoreShaping shaping, float* out,
                                 std::size_t out_ld, float* key0_weight, float* last_row) {
  __shared__ float query[kMaxHeadDim];
  __shared__ float weights[kKeyChunk];  // a chunk's scores, then its unnormalised weights
  __shared__ float reduce[kAttentionThreads];
  __shared__ float partial_out[kWarps][kMaxHeadDim];
  const int t = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int kv_head = h / group;
  const int limit = past + t + 1;
  const int first = window > 0 ? max(0, limit - window) : 0;
  const float slope = elementwise::alibi_slope(shaping.max_alibi_bias, h, heads);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) query[d] = q[t * q_ld + static_cast<std::size_t>(h) * head_dim + d];
  __syncthreads();

  const float* key_base = keys + static_cast<std::size_t>(kv_head) * head_dim;
  const float* value_base = values + static_cast<std::size_t>(kv_head) * head_dim;
  float running_max = -FLT_MAX, running_sum = 0.0f;
  float accumulated[kDimsPerLane] = {};  // this warp's keys, dimensions lane + 32 k
  float score0 = 0.0f;
  const bool keep_row = last_row != nullptr && t == tokens - 1;
  for (int chunk = first; chunk < limit; chunk += kKeyChunk) {
    const int n = min(kKeyChunk, limit - chunk);
    for (int j = warp; j < n; j += kWarps) {
      const float* key = key_base + static_cast<std::size_t>(chunk + j) * kv_ld;
      float dot = 0.0f;
      for (int d = lane; d < head_dim; d += kWarpSize) dot += query[d] * key[d];
      dot = warp_sum(dot);
      if (lane == 0) {
        const float score = scale * dot;
        weights[j] = shaping.on() ? elementwise::shape_score(score, shaping.softcap, slope, limit - 1 - (chunk + j))
                                  : score;
      }
    }
    __syncthreads();
    float chunk_max = -FLT_MAX;
    for (int j = threadIdx.x; j < n; j += blockDim.x) chunk_max = fmaxf(chunk_max, weights[j]);
    chunk_max = block_reduce(chunk_max, reduce, MaxOf{});
    if (chunk == 0) score0 = weights[0];
    const float new_max = fmaxf(running_max, chunk_max);
    const float rescale = expf(running_max - new_max);
    float partial = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      if (keep_row) last_row[static_cast<std::size_t>(h) * limit + chunk + j] = weights[j];
      const float w = expf(weights[j] - new_max);
      weights[j] = w;
      partial += w;
    }
    running_sum = running_sum * rescale + block_reduce(partial, reduce, SumOf{});  // also publishes weights[]
    for (int k = 0; k < kDimsPerLane; ++k) accumulated[k] *= rescale;
    for (int j = warp; j < n; j += kWarps) {
      const float w = weights[j];
      const float* value = value_base + static_cast<std::size_t>(chunk + j) * kv_ld;
      for (int k = 0; k < kDimsPerLane; ++k) {
        const int d = lane + k * kWarpSize;
        if (d < head_dim) accumulated[k] += w * value[d];
      }
    }
    running_max = new_max;
    __syncthreads();  // weights[] is rewritten by the next chunk
  }
  for (int k = 0; k < kDimsPerLane; ++k) {
    const int d = lane + k * kWarpSize;
    if (d < head_dim) partial_out[warp][d] = accumulated[k];
  }
  __syncthreads();
  const float inverse = 1.0f / running_sum;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += partial_out[w][d];
    out[t * out_ld + static_cast<std::size_t>(h) * head_dim + d] = sum * inverse;
  }
  if (key0_weight != nullptr && threadIdx.x == 0) {
    key0_weight[static_cast<std::size_t>(h) * tokens + t] = first == 0 ? expf(score0 - running_max) * inverse : 0.0f;
  }
  if (keep_row) {
    __syncthreads();  // every thread's raw scores are in last_row
    float* row = last_row + static_cast<std::size_t>(h) * limit;
    for (int j = threadIdx.x; j < limit; j += blockDim.x) row[j] = j < first ? 0.0f : expf(row[j] - running_max) * inverse;
  }
}

}  // namespace

void attention(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
               int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
               const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
               float* last_row, void* stream) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("attention (cuda): " + why + " (tokens " + std::to_string(tokens) + ", past " +
                                std::to_string(past) + ", heads " + std::to_string(heads) + "/" +
                                std::to_string(kv_heads) + ", head_dim " + std::to_string(head_dim) + ")");
  };
  if (tokens < 0 || past < 0 || window < 0) fail("negative count");
  if (head_dim <= 0 || head_dim > kMaxHeadDim) fail("head_dim must be 1.." + std::to_string(kMaxHeadDim));
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) fail("heads must be a multiple of kv_heads");
  if (q_ld < static_cast<std::size_t>(heads) * head_dim || out_ld < static_cast<std::size_t>(heads) * head_dim ||
      kv_ld < static_cast<std::size_t>(kv_heads) * head_dim) {
    fail("a row stride is narrower than its heads");
  }
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads));
  attention_kernel<<<grid, kAttentionThreads, 0, as_stream(stream)>>>(q, q_ld, keys, values, kv_ld, tokens, past,
                                                                     heads, heads / kv_heads, head_dim, window, scale,
                                                                     shaping, out, out_ld, key0_weight, last_row);
  check_launch("attention");
}

}  // namespace midtune::engine::cuda
