// The CUDA kernels of the GPU family's own forms, on device pointers: the
// attention over its row-major KV cache, the bf16 products (cuBLAS) and
// the dequantisation of file blocks, the embedding, SIW's correction over
// the cache (the contracts of devices/device_ops.hpp). The CUDA bodies of
// the ops over plain rows are declared in their ops' headers instead
// (op_target.hpp). Each kernel evaluates the per-element functions of
// elementwise.hpp that the host bodies evaluate, so the two differ only in
// summation order and in the device's math library;
// tests/engine/device_bodies_test.cpp checks every one against the host
// reference (and reports itself skipped where there is no device).
//
// Declared only in builds with CUDA (MIDTUNE_WITH_CUDA). Arguments are checked
// as the CPU ops check them (std::invalid_argument); a failed launch throws
// std::runtime_error naming the op and the CUDA error. `stream` is a
// cudaStream_t (nullptr: the default stream); the calls are asynchronous.
#pragma once

#if defined(MIDTUNE_WITH_CUDA)

#include <cstddef>
#include <cstdint>

#include "backends/engine/gguf/rope_pairing.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

// Causal attention (attention.hpp's contract, for a whole call at once):
// `tokens` queries of `heads` heads over a cache of `past + tokens` keys of
// `kv_heads` heads (query head h reads cache head h / (heads / kv_heads)).
//   q: [tokens][q_ld], head h at h * head_dim (already rotated)
//   keys, values: [past + tokens][kv_ld], head g at g * head_dim (row-major:
//     the GPU cache needs no blocked layout)
//   out: [tokens][out_ld]
// Query t sees keys [first, limit): limit = past + t + 1, first = max(0,
// limit - window) for a sliding window (window > 0), else 0;
// p = softmax(shape(scale * q K^T)) (elementwise::shape_score with head h's
// ALiBi slope; off: unshaped), out = p V, accumulated in float with a running
// maximum over chunks of keys. Readouts, optional (nullptr: none):
// key0_weight [heads][tokens] each query's weight on key 0 (SIW's correction
// out += (alpha - 1) p0 v0 is applied by the caller), last_row
// [heads][past + tokens] the last query's softmax row per head (zero before
// `first`), log_sum_exp [heads][tokens] each query's log sum_k exp(score_k)
// (merge_attention.hpp). One thread block per (query, head); head_dim at
// most 256.
void attention(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld, int tokens,
               int past, int heads, int kv_heads, int head_dim, int window, float scale,
               const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight = nullptr,
               float* last_row = nullptr, float* log_sum_exp = nullptr, void* stream = nullptr);
// The same over a bf16 cache (keys and values bf16 bits, each read as its
// exact float: elementwise::bf16_value).
void attention(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
               std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
               const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight = nullptr,
               float* last_row = nullptr, float* log_sum_exp = nullptr, void* stream = nullptr);

// One sequence of decode_attention: its cache (row-major, [capacity][slots
// x head_dim], keys rotated; floats, or bf16 bits where `bf16`: written
// rounded by elementwise::bf16_bits), its layer's RoPE scale per query head,
// its rows [row, row + tokens) of the packed matrices, its `past` cached
// keys. Every entry of one call has the same form.
struct DecodeEntry {
  void* keys;
  void* values;
  const float* scales;
  int row, tokens, past, slots;
  bool bf16;
};

// How decode_attention may split a small step's keys over more blocks
// (flash-decoding): the GPU's multiprocessor count, at most `max_splits`
// parts a query (1: never split; at most decode_split::kMaxSplits), and a
// device workspace of `workspace_bytes`, decode_split_workspace_bytes(
// multiprocessors) for any step (nullptr: never split; smaller: a step that
// needs more throws std::invalid_argument, as the prefill bodies do).
struct DecodeSplitting {
  int multiprocessors = 0;
  int max_splits = 1;
  float* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
std::size_t decode_split_workspace_bytes(int multiprocessors);

// device.hpp's decode_attention for `count` sequences: their values cached,
// their keys cached rotated (slot s at the scale of query head s, or s x
// heads / kv_heads where the slots are the KV heads), their queries rotated
// into q_rot, then attention() of each over its own cache, written to out.
// The angles in double as rope_tables computes them (elementwise::
// rope_cos_sin; rope_dims 0: no rotation). Two launches per 64 sequences
// (three where `splitting` splits their keys): the entries travel as a
// kernel argument, so a step needs no upload.
void decode_attention(const DecodeEntry* entries, int count, const float* qkv, std::size_t qkv_ld,
                      const double* positions, const double* inverse_frequencies, int rope_dims, RopePairing pairing,
                      int heads, int kv_heads, int head_dim, int window, float scale,
                      const elementwise::ScoreShaping& shaping, float* q_rot, std::size_t q_rot_ld, float* out,
                      std::size_t out_ld, const DecodeSplitting& splitting = {}, void* stream = nullptr);

// cuBLAS for the matrix products: one per thread of work (not thread-safe),
// bound to the device current when it is made.
class CublasContext {
 public:
  CublasContext();  // throws std::runtime_error with cuBLAS's status
  ~CublasContext();
  CublasContext(const CublasContext&) = delete;
  CublasContext& operator=(const CublasContext&) = delete;
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

// attention() for calls of many queries, through cuBLAS: per query head
// scores = scale * Q K^T (TF32 tensor cores, fp32 sums), masked softmax with
// the same readouts, out = P V (P and V rounded to fp16: the precision of a
// TF32 input, half the bytes; fp32 sums). `workspace` holds at least
// attention_gemm_workspace(..., heads / kv_heads) bytes: the values in fp16
// and one GQA group's scores and weights of one query block; with up to
// attention_gemm_workspace(..., heads), more heads go at once. Over a bf16
// cache (bf16_cache true in the workspace's size) the keys are widened to
// fp32 in the workspace first (exact; the scores' product stays TF32) and
// the values go from bf16 to fp16 (exact in fp16's range).
std::size_t attention_gemm_workspace(int tokens, int past, int kv_heads, int head_dim, int heads_at_once,
                                     bool bf16_cache = false);
void attention_gemm(const CublasContext& cublas, const float* q, std::size_t q_ld, const float* keys,
                    const float* values, std::size_t kv_ld, int tokens, int past, int heads, int kv_heads,
                    int head_dim, int window, float scale, const elementwise::ScoreShaping& shaping, float* out,
                    std::size_t out_ld, float* key0_weight, float* last_row, void* workspace,
                    std::size_t workspace_bytes, void* stream = nullptr);
void attention_gemm(const CublasContext& cublas, const float* q, std::size_t q_ld, const std::uint16_t* keys,
                    const std::uint16_t* values, std::size_t kv_ld, int tokens, int past, int heads, int kv_heads,
                    int head_dim, int window, float scale, const elementwise::ScoreShaping& shaping, float* out,
                    std::size_t out_ld, float* key0_weight, float* last_row, void* workspace,
                    std::size_t workspace_bytes, void* stream = nullptr);

// bf16 bits of `count` floats (elementwise::bf16_bits): activations before a
// product, weights once at upload.
void to_bf16(const float* x, std::size_t count, std::uint16_t* out, void* stream = nullptr);

// y[rows][ld_y] = x[rows][inputs] . w^T with x and w in bf16 (w: [outputs]
// [inputs], row-major, as ggml stores a weight matrix) and fp32 accumulation
// and output (cublasGemmEx, CUBLAS_COMPUTE_32F); runs on the context's stream.
void matmul_bf16(const CublasContext& cublas, const std::uint16_t* x, std::size_t ld_x, int rows, int inputs,
                 const std::uint16_t* w, int outputs, float* y, std::size_t ld_y, void* stream = nullptr);

// out[r][c] (rows x cols, row-major) = bf16_bits of dequantize_row's value c
// of row r (dequant.hpp), from rows of ggml blocks `row_bytes` apart, the
// type by its ggml id (GgmlType's value: this header stays C++17, without
// the GGUF reader): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, or BF16
// (copied). Bit-identical to the host's. Throws std::invalid_argument for
// another type or a shape that does not fill whole blocks.
void dequantize_bf16(std::uint32_t ggml_type, const void* blocks, std::size_t row_bytes, int rows, int cols,
                     std::uint16_t* out, void* stream = nullptr);

// The GPU family's remaining ops (contracts: devices/device_ops.hpp).
// out[i] = elementwise::bf16_value(x[i]) (exact).
void from_bf16(const std::uint16_t* x, std::size_t count, float* out, void* stream = nullptr);
void embed(const float* table, int width, const std::int32_t* tokens, int count, float scale, float* out,
           void* stream = nullptr);
void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads, int head_dim,
                         const float* key0_weight, const float* factors, const float* values, void* stream = nullptr);

}  // namespace midtune::engine::cuda

#endif  // MIDTUNE_WITH_CUDA
