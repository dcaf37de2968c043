// The fourth CUDA body of attention (cuda_ops.hpp's contract, for calls of
// many queries): cuDNN's fused flash attention, the graph API's sdpa
// through the header-only cudnn-frontend — the kernel PyTorch's sdpa runs
// for causal bf16 attention. Declared only in builds that found cuDNN and
// the frontend's headers (MIDTUNE_WITH_CUDNN).
#pragma once

#if defined(MIDTUNE_WITH_CUDNN)

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

// One per device stream: a cuDNN handle, the graphs built so far (one per
// call shape: building one costs milliseconds, running it microseconds) and
// the buffers a call needs, grown as calls grow.
//
// A call: queries, keys and values rounded to bf16 in [token][head][dim]
// buffers (the cache's bf16 elements are copied as they are), cuDNN's sdpa
// with a bottom-right causal mask (query t of the call is position past + t),
// the sliding window as its diagonal band (window keys up to the query's
// own), GQA by its K/V head count, the output (bf16) widened into `out`.
// Score shaping (gemma2's soft-cap, MPT's ALiBi) as a score modifier of the
// graph, which then carries the causal band and window itself (cuDNN adds
// none of its masks to such a graph; its own ALiBi has only the slopes of
// max bias 8 and a top-left diagonal). Readouts as the flash body gives
// them: each query's weight on key 0 from cuDNN's log-sum-exp statistics
// (exp(shaped score_0 - lse), score_0 from the same bf16 inputs), the last
// query's row by attention() afterwards.
class CudnnAttention {
 public:
  explicit CudnnAttention(void* stream);  // throws std::runtime_error naming cuDNN's status
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Whether calls of this head size are this body's: a multiple of 8 up to
  // 256 (cuDNN's sdpa); the caller runs the flash body for others.
  static bool takes(int head_dim);

  // cuda_ops.hpp's attention() arguments; false (nothing written) where cuDNN
  // has no plan for the shape (said once per shape on stderr): the caller
  // runs the flash body then.
  bool run(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld, int tokens,
           int past, int heads, int kv_heads, int head_dim, int window, float scale,
           const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
           float* last_row);
  bool run(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values, std::size_t kv_ld,
           int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
           const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
           float* last_row);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The element passes around cuDNN's call (cudnn_attention_cuda.cu), on `stream`:
// q [tokens][q_ld] -> bf16 [tokens][heads][head_dim];
void pack_queries_bf16(const float* q, std::size_t q_ld, int tokens, int heads, int head_dim, std::uint16_t* out,
                       void* stream);
// keys or values [count][kv_ld] (floats or bf16 bits) -> bf16 [count][kv_heads][head_dim];
void pack_kv_bf16(const float* kv, std::size_t kv_ld, int count, int kv_heads, int head_dim, std::uint16_t* out,
                  void* stream);
void pack_kv_bf16(const std::uint16_t* kv, std::size_t kv_ld, int count, int kv_heads, int head_dim, std::uint16_t* out,
                  void* stream);
// bf16 [tokens][heads][head_dim] -> out [tokens][out_ld];
void unpack_output(const std::uint16_t* o, int tokens, int heads, int head_dim, float* out, std::size_t out_ld,
                   void* stream);
// key0_weight[h][t] = exp(scale * q_t . k_0 - lse[h][t]) from the packed bf16
// queries and keys (shaped by `shaping`), 0 where key 0 lies outside query
// t's window.
void key0_weights_from_lse(const std::uint16_t* q, const std::uint16_t* k, const float* lse, int tokens, int past,
                           int heads, int kv_heads, int head_dim, int window, float scale,
                           const elementwise::ScoreShaping& shaping, float* key0_weight, void* stream);

}  // namespace midtune::engine::cuda

#endif  // MIDTUNE_WITH_CUDNN
