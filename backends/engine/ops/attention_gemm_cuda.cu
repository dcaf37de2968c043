// The second CUDA body of attention (contract: cuda_ops.hpp), for calls of
// many queries (a prefill): scores = scale * Q K^T by cuBLAS (TF32 tensor
// cores, fp32 sums), then one kernel masks (causal, sliding window), takes
// the softmax in fp32 with the exact row maximum, writes the key-0 and
// last-row readouts and the weights P in fp16, then out = P V by cuBLAS with
// the values in fp16 (fp16 keeps the 11 significant bits a TF32 input has,
// in half the bytes of a float: the scores' memory traffic is what this body
// spends its time on; fp32 sums). The queries go in blocks of kQueryBlock
// rows, each against the keys its last query sees: causal attention then
// computes about half the score matrix, not all of it. Every product is
// batched over the KV heads (one cuBLAS call per query head of a GQA group,
// not one per head: launches dominated short prompts). As many heads go at
// once as the workspace holds. Query head h reads KV head
// h / (heads / kv_heads). Over a bf16 cache the keys are widened to fp32
// into the workspace (exact) for the same TF32 product, and the values go
// from bf16 to fp16 (exact in fp16's range): the numbers of the fp32 body
// over the widened cache.
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/cuda_reduce.cuh"
#include "backends/engine/ops/kv_element.cuh"

namespace midtune::engine::cuda {

namespace {

constexpr int kSoftmaxThreads = 256;

constexpr int kQueryBlock = 512;
constexpr std::size_t kAlign = 256;  // workspace regions start on cuBLAS-friendly boundaries

std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// out[r][i] = values[r][i] in fp16 for i < width. Beyond fp16's range a value
// saturates at +-65504 instead of becoming infinite (values are projections
// of a normalised row: never seen that large); NaN stays NaN.
template <typename Kv>
__global__ void values_to_half_kernel(const Kv* values, std::size_t ld, int width, std::size_t count, __half* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const float v = kv_load(values + i / width * ld + i % width);
  out[i] = __float2half_rn(isnan(v) ? v : fminf(fmaxf(v, -65504.0f), 65504.0f));
}

// out[r][i] = keys[r][i] as floats (a bf16 cache's keys for the TF32 product).
__global__ void keys_to_float_kernel(const std::uint16_t* keys, std::size_t ld, int width, std::size_t count,
                                     float* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = kv_load(keys + i / width * ld + i % width);
}

// One block per (query t0 + blockIdx.x, head h0 + blockIdx.y): the row of
// scores (row_keys long) becomes the row of weights in fp16.
__global__ void masked_softmax_kernel(float* scores, __half* probs, int block_tokens, int row_keys, int t0,
                                      int tokens, int past, int window, int h0, int heads,
                                      elementwise::ScoreShaping shaping, float* key0_weight, float* last_row) {
  __shared__ float reduce[kSoftmaxThreads];
  const int t = t0 + blockIdx.x, local_head = blockIdx.y, h = h0 + local_head;
  const int limit = past + t + 1;
  const int first = window > 0 ? max(0, limit - window) : 0;
  const std::size_t row_start = (static_cast<std::size_t>(local_head) * block_tokens + blockIdx.x) * row_keys;
  float* row = scores + row_start;
  __half* p_row = probs + row_start;
  if (shaping.on()) {
    // Shaped in place first: each thread rewrites only its own scores.
    const float slope = elementwise::alibi_slope(shaping.max_alibi_bias, h, heads);
    for (int j = first + threadIdx.x; j < limit; j += blockDim.x) {
      row[j] = elementwise::shape_score(row[j], shaping.softcap, slope, limit - 1 - j);
    }
  }
  float top = -FLT_MAX;
  for (int j = first + threadIdx.x; j < limit; j += blockDim.x) top = fmaxf(top, row[j]);
  top = block_reduce(top, reduce, MaxOf{});
  float sum = 0.0f;
  for (int j = first + threadIdx.x; j < limit; j += blockDim.x) sum += expf(row[j] - top);
  sum = block_reduce(sum, reduce, SumOf{});
  const float inverse = 1.0f / sum;
  const bool keep_row = last_row != nullptr && t == tokens - 1;  // then row_keys == past + tokens
  for (int j = threadIdx.x; j < row_keys; j += blockDim.x) {
    const float p = j >= first && j < limit ? expf(row[j] - top) * inverse : 0.0f;
    p_row[j] = __float2half_rn(p);
    if (keep_row) last_row[static_cast<std::size_t>(h) * row_keys + j] = p;
    if (j == 0 && key0_weight != nullptr) key0_weight[static_cast<std::size_t>(h) * tokens + t] = p;
  }
}

template <typename Kv>
void attention_gemm_body(const CublasContext& cublas, const float* q, std::size_t q_ld, const Kv* cached_keys,
                         const Kv* values, std::size_t kv_ld, int tokens, int past, int heads, int kv_heads,
                         int head_dim, int window, float scale, const elementwise::ScoreShaping& shaping, float* out,
                         std::size_t out_ld, float* key0_weight, float* last_row, void* workspace,
                         std::size_t workspace_bytes, void* stream) {
  constexpr bool bf16_cache = std::is_same_v<Kv, std::uint16_t>;
  if (tokens < 0 || past < 0 || window < 0 || head_dim <= 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 ||
      q_ld < static_cast<std::size_t>(heads) * head_dim || out_ld < static_cast<std::size_t>(heads) * head_dim ||
      kv_ld < static_cast<std::size_t>(kv_heads) * head_dim) {
    throw std::invalid_argument("attention (cuda, cuBLAS): tokens " + std::to_string(tokens) + ", past " +
                                std::to_string(past) + ", heads " + std::to_string(heads) + "/" +
                                std::to_string(kv_heads) + ", head_dim " + std::to_string(head_dim));
  }
  if (tokens == 0) return;
  const int group = heads / kv_heads;
  const std::size_t least = attention_gemm_workspace(tokens, past, kv_heads, head_dim, group, bf16_cache);
  if (workspace_bytes < least) {
    throw std::invalid_argument("attention (cuda, cuBLAS): a workspace of " + std::to_string(workspace_bytes) +
                                " bytes, a GQA group needs " + std::to_string(least));
  }
  const auto handle = static_cast<cublasHandle_t>(cublas.handle());
  check_cublas(cublasSetStream(handle, as_stream(stream)), "set stream");
  const float zero = 0.0f, one = 1.0f;
  const int hd = head_dim, key_count = past + tokens, kv_width = kv_heads * head_dim;

  // Every visible value row in fp16, once for all query blocks.
  auto* values_half = static_cast<__half*>(workspace);
  const std::size_t value_count = static_cast<std::size_t>(key_count) * kv_width;
  values_to_half_kernel<<<blocks_for(value_count), kThreadsPerBlock, 0, as_stream(stream)>>>(
      values, kv_ld, kv_width, value_count, values_half);
  check_launch("attention values to fp16");
  std::size_t used = aligned(value_count * sizeof(__half));
  // The keys the scores' product reads: the cache's own, or widened from bf16.
  const float* keys;
  std::size_t keys_ld;
  if constexpr (bf16_cache) {
    auto* wide = reinterpret_cast<float*>(static_cast<char*>(workspace) + used);
    keys_to_float_kernel<<<blocks_for(value_count), kThreadsPerBlock, 0, as_stream(stream)>>>(
        cached_keys, kv_ld, kv_width, value_count, wide);
    check_launch("attention keys to fp32");
    used += aligned(value_count * sizeof(float));
    keys = wide;
    keys_ld = static_cast<std::size_t>(kv_width);
  } else {
    keys = cached_keys;
    keys_ld = kv_ld;
  }
  char* const scratch = static_cast<char*>(workspace) + used;
  const std::size_t scratch_bytes = workspace_bytes - used;

  for (int t0 = 0; t0 < tokens; t0 += kQueryBlock) {
    const int block_tokens = std::min(kQueryBlock, tokens - t0);
    const int row_keys = past + t0 + block_tokens;  // the keys the block's last query sees
    const std::size_t per_head = static_cast<std::size_t>(block_tokens) * row_keys;
    // Whole GQA groups per pass, as many as the workspace holds (less the
    // padding between scores and weights).
    const std::size_t per_head_bytes = per_head * (sizeof(float) + sizeof(__half));
    const int heads_per_pass = static_cast<int>(
        std::min<std::size_t>(heads, (scratch_bytes - kAlign) / per_head_bytes / group * group));
    if (heads_per_pass < group) throw std::logic_error("attention (cuda, cuBLAS): workspace below a GQA group");
    float* const scores = reinterpret_cast<float*>(scratch);
    __half* const probs =
        reinterpret_cast<__half*>(scratch + aligned(per_head * heads_per_pass * sizeof(float)));
    for (int h0 = 0; h0 < heads; h0 += heads_per_pass) {
      const int count = std::min(heads_per_pass, heads - h0);
      const int g0 = h0 / group, kv_count = count / group;
      // Local head (g - g0) * group + i's scores start at that index times
      // per_head. Row-major S[t][j] is the column-major (row_keys x
      // block_tokens) C = K^T Q with K^T (head_dim x keys, ld kv_ld) and Q
      // (head_dim x tokens, ld q_ld); query head i of each group, batched over
      // the KV heads.
      for (int i = 0; i < group; ++i) {
        check_cublas(
            cublasGemmStridedBatchedEx(
                handle, CUBLAS_OP_T, CUBLAS_OP_N, row_keys, block_tokens, hd, &scale,
                keys + static_cast<std::size_t>(g0) * hd, CUDA_R_32F, static_cast<int>(keys_ld), hd,
                q + static_cast<std::size_t>(t0) * q_ld + (static_cast<std::size_t>(g0) * group + i) * hd, CUDA_R_32F,
                static_cast<int>(q_ld), static_cast<long long>(group) * hd, &zero, scores + i * per_head, CUDA_R_32F,
                row_keys, static_cast<long long>(group * per_head), kv_count, CUBLAS_COMPUTE_32F_FAST_TF32,
                CUBLAS_GEMM_DEFAULT),
            "attention scores");
      }
      masked_softmax_kernel<<<dim3(static_cast<unsigned>(block_tokens), static_cast<unsigned>(count)),
                              kSoftmaxThreads, 0, as_stream(stream)>>>(scores, probs, block_tokens, row_keys, t0,
                                                                       tokens, past, window, h0, heads, shaping,
                                                                       key0_weight, last_row);
      check_launch("attention softmax");
      // out (head_dim x tokens, ld out_ld) = V (head_dim x keys, ld kv_width) . P (keys x tokens).
      for (int i = 0; i < group; ++i) {
        check_cublas(
            cublasGemmStridedBatchedEx(
                handle, CUBLAS_OP_N, CUBLAS_OP_N, hd, block_tokens, row_keys, &one,
                values_half + static_cast<std::size_t>(g0) * hd, CUDA_R_16F, kv_width, hd, probs + i * per_head,
                CUDA_R_16F, row_keys, static_cast<long long>(group * per_head), &zero,
                out + static_cast<std::size_t>(t0) * out_ld + (static_cast<std::size_t>(g0) * group + i) * hd,
                CUDA_R_32F, static_cast<int>(out_ld), static_cast<long long>(group) * hd, kv_count,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "attention output");
      }
    }
  }
}

}  // namespace

std::size_t attention_gemm_workspace(int tokens, int past, int kv_heads, int head_dim, int heads_at_once,
                                     bool bf16_cache) {
  const std::size_t keys = static_cast<std::size_t>(past) + tokens;
  const std::size_t values = aligned(keys * kv_heads * head_dim * sizeof(__half));
  const std::size_t wide_keys = bf16_cache ? aligned(keys * kv_heads * head_dim * sizeof(float)) : 0;
  const std::size_t per_head = static_cast<std::size_t>(std::min(tokens, kQueryBlock)) * keys;
  // + kAlign: the padding that starts the weights on a boundary after the scores.
  return values + wide_keys + per_head * heads_at_once * (sizeof(float) + sizeof(__half)) + kAlign;
}

void attention_gemm(const CublasContext& cublas, const float* q, std::size_t q_ld, const float* keys,
                    const float* values, std::size_t kv_ld, int tokens, int past, int heads, int kv_heads,
                    int head_dim, int window, float scale, const elementwise::ScoreShaping& shaping, float* out,
                    std::size_t out_ld, float* key0_weight, float* last_row, void* workspace,
                    std::size_t workspace_bytes, void* stream) {
  attention_gemm_body(cublas, q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale,
                      shaping, out, out_ld, key0_weight, last_row, workspace, workspace_bytes, stream);
}

void attention_gemm(const CublasContext& cublas, const float* q, std::size_t q_ld, const std::uint16_t* keys,
                    const std::uint16_t* values, std::size_t kv_ld, int tokens, int past, int heads, int kv_heads,
                    int head_dim, int window, float scale, const elementwise::ScoreShaping& shaping, float* out,
                    std::size_t out_ld, float* key0_weight, float* last_row, void* workspace,
                    std::size_t workspace_bytes, void* stream) {
  attention_gemm_body(cublas, q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale,
                      shaping, out, out_ld, key0_weight, last_row, workspace, workspace_bytes, stream);
}

}  // namespace midtune::engine::cuda
