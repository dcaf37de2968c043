// The element passes around cuDNN's fused attention (contract:
// cudnn_attention_cuda.hpp): inputs rounded to bf16 in the [token][head][dim]
// layout the graph's strides name, the output widened back, and each query's
// key-0 weight from cuDNN's log-sum-exp. One thread per element (the
// packing) or per (query, head) (the key-0 weight): bandwidth-bound passes
// over a few MB beside an attention that reads every key once per query block.
#include <cmath>
#include <cstdint>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cudnn_attention_cuda.hpp"
#include "backends/engine/ops/kv_element.cuh"

namespace midtune::engine::cuda {
namespace {

// Rows of `row_ld` elements, each `width` = heads * head_dim used, packed
// to rows of `width` bf16s (the cache's bf16 elements copied exactly).
template <typename T>
__global__ void pack_rows_kernel(const T* in, std::size_t row_ld, int rows, int width, std::uint16_t* out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * width) return;
  const std::size_t row = i / width, col = i % width;
  out[i] = elementwise::bf16_bits(kv_load(in + row * row_ld + col));
}

__global__ void unpack_rows_kernel(const std::uint16_t* in, int rows, int width, float* out, std::size_t out_ld) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * width) return;
  const std::size_t row = i / width, col = i % width;
  out[row * out_ld + col] = elementwise::bf16_value(in[i]);
}

__global__ void key0_weights_kernel(const std::uint16_t* q, const std::uint16_t* k, const float* lse, int tokens,
                                    int past, int heads, int kv_heads, int head_dim, int window, float scale,
                                    elementwise::ScoreShaping shaping, float* key0_weight) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= heads * tokens) return;
  const int h = i / tokens, t = i % tokens;
  // Key 0 is seen by query t unless a window starts after it (the engine's
  // first = limit - window, limit = past + t + 1).
  if (window > 0 && past + t + 1 - window > 0) {
    key0_weight[i] = 0.0f;
    return;
  }
  const std::uint16_t* qt = q + (static_cast<std::size_t>(t) * heads + h) * head_dim;
  const std::uint16_t* k0 = k + static_cast<std::size_t>(h / (heads / kv_heads)) * head_dim;
  float dot = 0.0f;
  for (int d = 0; d < head_dim; ++d) dot += elementwise::bf16_value(qt[d]) * elementwise::bf16_value(k0[d]);
  // Shaped as the graph's score modifier shaped it; key 0 lies past + t
  // before query t. lse is laid out [head][token], as key0_weight is.
  const float score = elementwise::shape_score(dot * scale, shaping.softcap,
                                               elementwise::alibi_slope(shaping.max_alibi_bias, h, heads), past + t);
  key0_weight[i] = expf(score - lse[i]);
}

template <typename T>
void pack(const T* in, std::size_t row_ld, int rows, int width, std::uint16_t* out, void* stream, const char* what) {
  const std::size_t count = static_cast<std::size_t>(rows) * width;
  if (count == 0) return;
  pack_rows_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(in, row_ld, rows, width, out);
  check_launch(what);
}

}  // namespace

void pack_queries_bf16(const float* q, std::size_t q_ld, int tokens, int heads, int head_dim, std::uint16_t* out,
                       void* stream) {
  pack(q, q_ld, tokens, heads * head_dim, out, stream, "attention (cudnn) queries to bf16");
}

void pack_kv_bf16(const float* kv, std::size_t kv_ld, int count, int kv_heads, int head_dim, std::uint16_t* out,
                  void* stream) {
  pack(kv, kv_ld, count, kv_heads * head_dim, out, stream, "attention (cudnn) keys and values to bf16");
}

void pack_kv_bf16(const std::uint16_t* kv, std::size_t kv_ld, int count, int kv_heads, int head_dim, std::uint16_t* out,
                  void* stream) {
  pack(kv, kv_ld, count, kv_heads * head_dim, out, stream, "attention (cudnn) keys and values packed");
}

void unpack_output(const std::uint16_t* o, int tokens, int heads, int head_dim, float* out, std::size_t out_ld,
                   void* stream) {
  const std::size_t count = static_cast<std::size_t>(tokens) * heads * head_dim;
  if (count == 0) return;
  unpack_rows_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(o, tokens, heads * head_dim, out,
                                                                                    out_ld);
  check_launch("attention (cudnn) output to fp32");
}

void key0_weights_from_lse(const std::uint16_t* q, const std::uint16_t* k, const float* lse, int tokens, int past,
                           int heads, int kv_heads, int head_dim, int window, float scale,
                           const elementwise::ScoreShaping& shaping, float* key0_weight, void* stream) {
  const std::size_t count = static_cast<std::size_t>(heads) * tokens;
  if (count == 0) return;
  key0_weights_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(
      q, k, lse, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, key0_weight);
  check_launch("attention (cudnn) key-0 weights");
}

}  // namespace midtune::engine::cuda
