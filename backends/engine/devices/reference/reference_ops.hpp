// The host body of DeviceOps: "device" memory is host memory and every op is
// computed with the CPU engine's per-element arithmetic (ops/elementwise.hpp),
// matrix products in float over bf16-rounded inputs (Eigen). Slow and
// simple: it is the reference each CUDA op is checked against, and the device
// on which the batched model's own code is tested where there is no GPU. Not
// a user-facing device (backend.device is cpu or cuda).
#pragma once

#include <vector>

#include "backends/engine/devices/device_ops.hpp"
#include "backends/engine/devices/host_memory.hpp"

namespace midtune::engine::devices {

class ReferenceOps final : public HostMemoryDevice<DeviceOps> {
 public:
  // The ops over rows: ops/'s scalar host bodies, on the calling thread.
  OpTarget op_target() const override { return OpTarget::host(Isa::scalar, false); }
  std::string name() const override { return "host reference"; }

  void embed_rows(const float* table, int width, const std::int32_t* tokens, int count, float scale,
                  float* out) override;
  void to_bf16(const float* x, std::size_t count, std::uint16_t* out) override;
  void matmul_bf16(const std::uint16_t* x, std::size_t ld_x, int rows, int inputs, const std::uint16_t* w,
                   int outputs, float* y, std::size_t ld_y) override;
  void attention_rows(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
                      int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
                      const ScoreShaping& shaping, float* out, std::size_t out_ld,
                      const AttentionReadouts& readouts) override;
  void attention_rows_bf16(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
                           std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window,
                           float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                           const AttentionReadouts& readouts) override;
  void from_bf16(const std::uint16_t* x, std::size_t count, float* out) override;
  float* float_scratch(std::size_t count) override;
  void add_key0_correction_rows(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads, int head_dim,
                                const float* key0_weight, const float* factors, const float* values,
                                std::size_t kv_ld) override;
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

}  // namespace midtune::engine::devices
