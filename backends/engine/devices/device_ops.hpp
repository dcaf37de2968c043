// The GPU family of devices: a Device (../device.hpp) whose products take
// bf16 weights and whose KV cache is row-major fp32 or bf16, built from a few
// pointer-level kernels each body implements: CudaOps (cuda_ops_device.cpp)
// runs them on an NVIDIA GPU through the kernels of
// backends/engine/ops/*_cuda.cu and cuBLAS; ReferenceOps (reference_ops.cpp)
// computes the same contracts on the host with the CPU engine's
// per-element arithmetic, so the model's code runs and is tested in this
// form on machines without a GPU, and every CUDA op is checked against it op
// by op where there is one. The weight, embedding and KV-cache parts of
// Device are written here once, in terms of those kernels.
//
// Weights (WeightForm): `bf16` widens every matrix to bf16 at load; `file`
// keeps each part in its GGUF block type and dequantises it into a bf16 tile
// inside each product. Both multiply the same bf16 numbers (each weight is
// dequantize_row's value rounded by bf16_bits), so their results differ only
// where cuBLAS sums a tile in another order than the whole matrix; `file`
// takes the file's bytes (Q4_K: 4.5 bits a weight against bf16's 16).
// A `file` product of at most block_gemv_rows() rows (decode steps) skips
// the tile: matmul_blocks multiplies straight from the blocks, with the same
// bf16 weights and activations and fp32 sums (ops/block_gemv.hpp).
//
// KV cache: per layer, keys (already rotated) and values, row-major
// [position][slot x head_dim]; in a layer with per-head slots the values are
// repeated per head. KvForm `fp32` keeps them in fp32; `bf16` keeps each one
// rounded to bf16 (bf16_bits of the fp32 value the fp32 cache holds: keys
// rotated in fp32 first), half the bytes, and attention widens them back
// exactly and computes in fp32 as over the fp32 cache: the two differ only by
// that one rounding of each cached element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/engine/devices/device.hpp"

namespace midtune::engine::devices {

enum class WeightForm { bf16, file };
using engine::KvForm;

// The body of a prefill-sized attention call (attention_rows from 32 queries
// on; fewer take the one-block-per-query kernel): `gemm` the cuBLAS body
// (scores through memory), `flash` the FlashAttention-2 kernel (scores on the
// chip; CudaOps's default), `cudnn` cuDNN's fused attention (builds with
// cuDNN only, cudnn_attention_cuda.hpp; calls it does not take run the flash
// body). ReferenceOps ignores it and keeps `gemm`, so its precision names no
// body it does not run.
enum class PrefillAttention { gemm, flash, cudnn };
// "gemm" / "flash" / "cudnn" (where this build has cuDNN); anything else
// throws std::invalid_argument naming `where` and the reason.
PrefillAttention parse_prefill_attention(const std::string& name, const std::string& where);
const char* to_string(PrefillAttention body);

class DeviceOps : public Device {
 public:
  // The CUDA attention kernel keeps a head in one thread block.
  std::uint32_t max_head_dim() const override { return 256; }

  // Before the model loads (matrices keep the form they were loaded in).
  void set_weight_form(WeightForm form) { weight_form_ = form; }
  WeightForm weight_form() const { return weight_form_; }
  // Any time (the next attention call takes it). CudaOps starts from the
  // environment's MIDTUNE_CUDA_ATTENTION (gemm | flash | cudnn; unset: flash).
  void set_prefill_attention(PrefillAttention body) { prefill_attention_ = body; }
  PrefillAttention prefill_attention() const { return prefill_attention_; }
  // The body that ran the last prefill-sized attention call (the chosen one,
  // or the flash body where cuDNN's handed the call back): tests tell a
  // body's own result from its fallback's by it.
  PrefillAttention last_prefill_attention() const { return last_prefill_attention_; }
  // Rows of the bf16 tile a `file` product dequantises at once, times its
  // columns (tests: small, so that tiles cross the parts of a fused matrix).
  void set_weight_tile_elements(std::size_t elements) { weight_tile_elements_ = elements; }
  // The most rows a `file` product multiplies straight from the blocks
  // (matmul_blocks) rather than through a dequantised tile. The tile path
  // writes and reads 2 bytes a weight besides reading the blocks, which the
  // few rows of a decode step cannot amortise (on an H100, decode ran at
  // 0.28x of the bf16 form at batch 1 and 0.34x at batch 32 through tiles);
  // the block kernel reads each weight once per 16 rows and does its
  // multiply-adds in fp32 without tensor cores, so its time grows with
  // every row while the tile path's barely does: on an H100 (a 7B shape in
  // Q4_K / Q6_K blocks) it wins at 1 and 8 rows and loses at 32, the two
  // crossing near 16 (cuda_bench_cli --file-gemv both, --file-gemv-rows N).
  static constexpr int kBlockGemvRows = 16;
  void set_block_gemv_rows(int rows) { block_gemv_rows_ = rows; }  // 0: always the tile
  int block_gemv_rows() const { return block_gemv_rows_; }
  // The form of the caches made from now on (a cache keeps the form it was
  // made in).
  void set_kv_form(KvForm form) { kv_form_ = form; }
  KvForm kv_form() const { return kv_form_; }
  std::size_t kv_value_bytes() const override { return kv_form_ == KvForm::bf16 ? 2 : sizeof(float); }
  // What the products compute in, stored in the model identity of results
  // run on this device: "bf16", or "bf16 from file blocks" (its own
  // identity until the two are measured equal on the GPU), followed by
  // ", bf16 KV cache" with that cache (other numbers; the fp32 cache adds
  // nothing, so identities stored before the choice stay as they are) and
  // ", flash attention" where the prefill attention is the flash body (its
  // products over fp16 inputs differ from the cuBLAS body's).
  std::string precision() const;
  // The block types a `file` matrix keeps as they are on the device (the
  // float types are stored as bf16; any other type is widened to bf16 at
  // load, as in the bf16 form).
  static bool keeps_blocks(GgmlType type);

  // Device's weights and KV cache in bf16 and row-major form, through the
  // kernels below.
  std::unique_ptr<DeviceMatrix> load_matrix(const std::vector<MatrixPart>& parts, int cols) override;
  std::unique_ptr<DeviceEmbedding> load_embedding(const MatrixPart& table, int width, std::size_t row_bytes) override;
  void embed(const DeviceEmbedding& table, const std::int32_t* tokens, int count, float scale, float* out) override;
  void matmul(const DeviceMatrix& w, const float* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) override;
  std::unique_ptr<LayerKv> make_layer_kv(int capacity, int slots, int kv_heads, int head_dim) override;
  void cache_keys(LayerKv& kv, int start, const float* keys, std::size_t ld, int tokens, int rope_dims,
                  RopePairing pairing, const float* cos_sin, std::size_t slot_table_stride) override;
  void cache_values(LayerKv& kv, int start, const float* values, std::size_t ld, int tokens) override;
  void attention(const float* q, std::size_t q_ld, const LayerKv& kv, int tokens, int past, int heads, int window,
                 float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                 const AttentionReadouts& readouts) override;
  void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, const LayerKv& kv,
                           const float* key0_weight, const float* factors) override;

  // ---- the kernels
  // out[i] = table[tokens[i]] * scale (table: vocab x width, fp32).
  virtual void embed_rows(const float* table, int width, const std::int32_t* tokens, int count, float scale,
                          float* out) = 0;
  // bf16 bits of `count` floats, rounded to nearest even (elementwise::bf16_bits).
  virtual void to_bf16(const float* x, std::size_t count, std::uint16_t* out) = 0;
  // y[rows][outputs] = x[rows][inputs] . w[outputs][inputs]^T, bf16 inputs, fp32 sums.
  virtual void matmul_bf16(const std::uint16_t* x, std::size_t ld_x, int rows, int inputs, const std::uint16_t* w,
                           int outputs, float* y, std::size_t ld_y) = 0;
  // Causal attention over row-major keys and values (cuda_ops.hpp's
  // contract): query head h reads KV column h / (heads / kv_heads).
  virtual void attention_rows(const float* q, std::size_t q_ld, const float* keys, const float* values,
                              std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim,
                              int window, float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                              const AttentionReadouts& readouts) = 0;
  // attention_rows over a bf16 cache: keys and values are bf16 bits, each
  // read as its exact fp32 value (elementwise::bf16_value), the rest as
  // attention_rows computes it.
  virtual void attention_rows_bf16(const float* q, std::size_t q_ld, const std::uint16_t* keys,
                                   const std::uint16_t* values, std::size_t kv_ld, int tokens, int past, int heads,
                                   int kv_heads, int head_dim, int window, float scale, const ScoreShaping& shaping,
                                   float* out, std::size_t out_ld, const AttentionReadouts& readouts) = 0;
  // out[i] = elementwise::bf16_value(x[i]) for i < count (exact).
  virtual void from_bf16(const std::uint16_t* x, std::size_t count, float* out) = 0;
  // `count` floats of device memory for rows on their way into a bf16
  // cache, the body's own (valid until the next call).
  virtual float* float_scratch(std::size_t count) = 0;
  // SIW: out[t][h] += (factors[t] - 1) * key0_weight[h][t] * values[0][h / (heads / kv_heads)]
  // for t < tokens (factors and key0_weight hold `tokens` entries per head).
  virtual void add_key0_correction_rows(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads,
                                        int head_dim, const float* key0_weight, const float* factors,
                                        const float* values, std::size_t kv_ld) = 0;
  // `count` bf16 values of device memory for a product's input, the body's
  // own (valid until the next call).
  virtual std::uint16_t* bf16_scratch(std::size_t count) = 0;
  // out[r][c] (rows x cols, row-major) = bf16_bits of dequantize_row's value
  // c of row r, rows of ggml blocks of `type` (keeps_blocks) `row_bytes`
  // apart from `blocks` (device memory): exactly what the bf16 form holds.
  virtual void dequantize_bf16(GgmlType type, const void* blocks, std::size_t row_bytes, int rows, int cols,
                               std::uint16_t* out) = 0;
  // y[rows][outputs] (rows ld_y apart) = x . w^T straight from `outputs`
  // rows of ggml blocks of `type` (keeps_blocks, not BF16) `row_bytes`
  // apart: ops/block_gemv.hpp's contract, the weights dequantize_bf16 would
  // give; x in bf16, rows ld_x apart.
  virtual void matmul_blocks(GgmlType type, const void* blocks, std::size_t row_bytes, int outputs, int cols,
                             const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) = 0;
  // `count` bf16 values of device memory for a `file` product's weight tile,
  // the body's own and apart from bf16_scratch (valid until the next call).
  virtual std::uint16_t* weight_scratch(std::size_t count) = 0;

 protected:
  void ran_prefill_attention(PrefillAttention body) { last_prefill_attention_ = body; }
  // The row-major keys and values of a cache this family made: floats, or
  // bf16 bits where `form` is bf16.
  struct KvRows {
    void* keys;
    void* values;
    KvForm form;
  };
  static KvRows rows_of(const LayerKv& kv);

 private:
  WeightForm weight_form_ = WeightForm::bf16;
  PrefillAttention prefill_attention_ = PrefillAttention::gemm;
  PrefillAttention last_prefill_attention_ = PrefillAttention::gemm;
  KvForm kv_form_ = KvForm::fp32;
  // 2^26 bf16 values (128 MiB): a 7B model's largest matrix (the output,
  // 32000 x 4096) in two tiles, a 70B's gate|up (57344 x 8192) in seven.
  std::size_t weight_tile_elements_ = std::size_t{1} << 26;
  int block_gemv_rows_ = kBlockGemvRows;
  void copy_to_slots(const LayerKv& kv, float* cache, int start, const float* rows, std::size_t ld, int tokens);
};

}  // namespace midtune::engine::devices
