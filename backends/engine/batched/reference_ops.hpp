// The host body of DeviceOps: "device" memory is host memory and every op is
// computed with the CPU engine's per-element arithmetic (ops/elementwise.hpp),
// matrix products in float over bf16-rounded inputs (Eigen). Slow and
// simple: it is the reference each CUDA op is checked against, and the device
// on which the batched model's own code is tested where there is no GPU. Not
// a user-facing device (backend.device is cpu or cuda).
#pragma once

#include <vector>

#include "backends/engine/batched/device_ops.hpp"
#include "backends/engine/host_memory.hpp"

namespace midtune::engine::batched {

class ReferenceOps final : public HostMemoryDevice<DeviceOps> {
 public:
  std::string name() const override { return "host reference"; }

  void embed_rows(const float* table, int width, const std::int32_t* tokens, int count, float scale,
                  float* out) override;
  void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                     std::size_t ld_y) override;
  void layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows, int width,
                       float eps, float* y, std::size_t ld_y) override;
  void rms_norm_heads(float* x, std::size_t ld, int tokens, int heads, int head_dim, const float* weight,
                      float eps) override;
  void to_bf16(const float* x, std::size_t count, std::uint16_t* out) override;
  void matmul_bf16(const std::uint16_t* x, std::size_t ld_x, int rows, int inputs, const std::uint16_t* w,
                   int outputs, float* y, std::size_t ld_y) override;
  void add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width) override;
  void add(float* x, const float* y, std::size_t count) override;
  void cap_values(float* x, std::size_t count, float cap, bool soft) override;
  void gated_activation(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in, int rows,
                        int width, float* out, std::size_t ld_out) override;
  void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                   const double* inverse_frequencies, int pairs, float* cos_sin) override;
  void rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims, RopePairing pairing,
                 const float* cos_sin, std::size_t head_table_stride) override;
  void attention_rows(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
                      int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
                      const ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
                      float* last_row) override;
  void attention_rows_bf16(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
                           std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window,
                           float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                           float* key0_weight, float* last_row) override;
  void from_bf16(const std::uint16_t* x, std::size_t count, float* out) override;
  float* float_scratch(std::size_t count) override;
  void add_key0_correction_rows(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads, int head_dim,
                                const float* key0_weight, const float* factors, const float* values,
                                std::size_t kv_ld) override;
  void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                          const float* normed, std::size_t normed_ld, int channel, double scale,
                          const float* column) override;
  void last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads, int head_dim,
                       std::size_t k_offset, float* rows) override;
  void score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold, std::int32_t* argmax,
                  double* gold_logprob) override;
  std::uint16_t* bf16_scratch(std::size_t count) override;
  void dequantize_bf16(GgmlType type, const void* blocks, std::size_t row_bytes, int rows, int cols,
                       std::uint16_t* out) override;
  std::uint16_t* weight_scratch(std::size_t count) override;
  void matmul_blocks(GgmlType type, const void* blocks, std::size_t row_bytes, int outputs, int cols,
                     const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) override;

 private:
  std::vector<std::uint16_t> bf16_scratch_, weight_scratch_;
  std::vector<float> float_scratch_;
};

}  // namespace midtune::engine::batched
