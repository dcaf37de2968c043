// The CUDA bodies of the element-wise ops, on device pointers: the same
// contracts as the CPU ops (rmsnorm.hpp, rope.hpp, gated_activation.hpp),
// batched over whole token matrices as the GPU engine feeds them. Each kernel
// evaluates the per-element functions of elementwise.hpp that the CPU
// reference bodies evaluate, so the two differ only in summation order and in
// the device's math library; tests/engine/device_bodies_test.cpp checks every
// one, through the CUDA Device body, against the host reference (and reports
// itself skipped where there is no device).
//
// Declared only in builds with CUDA (MIDTUNE_WITH_CUDA). Arguments are checked
// as the CPU ops check them (std::invalid_argument); a failed launch throws
// std::runtime_error naming the op and the CUDA error. `stream` is a
// cudaStream_t (nullptr: the default stream); the calls are asynchronous.
#pragma once

#if defined(MIDTUNE_WITH_CUDA)

#include <cstddef>
#include <cstdint>

#include "backends/engine/gguf/ffn_activation.hpp"
#include "backends/engine/gguf/rope_pairing.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

// RMSNorm of `rows` rows of `width`: y = x / sqrt(mean(x^2) + eps) * weight,
// the sum of squares in double. One thread block per row.
void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                   std::size_t ld_y, void* stream = nullptr);

// LayerNorm (rmsnorm.hpp's layer_norm_rows; bias nullptr: none). One thread
// block per row.
void layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows, int width,
                     float eps, float* y, std::size_t ld_y, void* stream = nullptr);

// x[i] = elementwise::cap_value(x[i], cap, soft) for i < count (row_updates.hpp).
void cap_values(float* x, std::size_t count, float cap, bool soft, void* stream = nullptr);

// RMSNorm of every head in place (Q/K norm): head h of token t, the head_dim
// values at x + t * ld + h * head_dim, normed as one rms_norm_rows row with
// `weight`. One thread block per (token, head).
void rms_norm_heads(float* x, std::size_t ld, int tokens, int heads, int head_dim, const float* weight, float eps,
                    void* stream = nullptr);

// The RoPE tables of `tables` scales for `tokens` positions:
// cos_sin[table][token][pair] = (cos, sin) of (position / scales[table]) *
// inverse_frequencies[pair], `pairs` = rope_dims / 2 (positions, frequencies
// in double as on the CPU).
void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                 const double* inverse_frequencies, int pairs, float* cos_sin, void* stream = nullptr);

// RoPE in place on `tokens` rows of x (row stride ld_x), each holding `heads`
// heads of `head_dim` values; dimensions from rope_dims on are left as they
// are. Head h of token t reads the table cos_sin + h * head_table_stride
// (0: one table for every head; per-head scales give each head its own) at
// entry t * rope_dims / 2. Pairing as rope.hpp states it.
void rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims, RopePairing pairing,
               const float* cos_sin, std::size_t head_table_stride, void* stream = nullptr);

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
// `first`). One thread block per (query, head); head_dim at most 256.
void attention(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
               int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
               const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight = nullptr,
               float* last_row = nullptr, void* stream = nullptr);
// The same over a bf16 cache (keys and values bf16 bits, each read as its
// exact float: elementwise::bf16_value).
void attention(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
               std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
               const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight = nullptr,
               float* last_row = nullptr, void* stream = nullptr);

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

// device.hpp's decode_attention for `count` sequences: their values cached,
// their keys cached rotated (slot s at the scale of query head s, or s x
// heads / kv_heads where the slots are the KV heads), their queries rotated
// into q_rot, then attention() of each over its own cache, written to out.
// The angles in double as rope_tables computes them (elementwise::
// rope_cos_sin; rope_dims 0: no rotation). Two launches per 64 sequences:
// the entries travel as a kernel argument, so a step needs no upload.
void decode_attention(const DecodeEntry* entries, int count, const float* qkv, std::size_t qkv_ld,
                      const double* positions, const double* inverse_frequencies, int rope_dims,
                      RopePairing pairing, int heads, int kv_heads, int head_dim, int window, float scale,
                      const elementwise::ScoreShaping& shaping, float* q_rot, std::size_t q_rot_ld, float* out,
                      std::size_t out_ld, void* stream = nullptr);

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

// SwiGLU or GeGLU by rows (gated_activation.hpp): out[r][c] =
// act(gate[r][c]) * up[r][c] for r < rows, c < width, gate and up rows ld_in
// apart, out rows ld_out apart (up nullptr: act(gate[r][c]) alone).
void gated_activation_rows(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in, int rows,
                           int width, float* out, std::size_t ld_out, void* stream = nullptr);

// The GPU family's remaining ops (contracts: devices/device_ops.hpp).
// out[i] = elementwise::bf16_value(x[i]) (exact).
void from_bf16(const std::uint16_t* x, std::size_t count, float* out, void* stream = nullptr);
void embed(const float* table, int width, const std::int32_t* tokens, int count, float scale, float* out,
           void* stream = nullptr);
void add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width, void* stream = nullptr);
void add(float* x, const float* y, std::size_t count, void* stream = nullptr);
void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads, int head_dim,
                         const float* key0_weight, const float* factors, const float* values, void* stream = nullptr);
void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width, const float* normed,
                        std::size_t normed_ld, int channel, double scale, const float* column, void* stream = nullptr);
// last_query_rows.hpp's contract on the device.
void last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads, int head_dim,
                     std::size_t k_offset, float* rows, void* stream = nullptr);
// scoring.hpp's argmax and gold log-probability per row (gold nullptr: argmax only).
void score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold, std::int32_t* argmax,
                double* gold_logprob, void* stream = nullptr);

}  // namespace midtune::engine::cuda

#endif  // MIDTUNE_WITH_CUDA
