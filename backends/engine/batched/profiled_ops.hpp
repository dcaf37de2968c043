// A DeviceOps that times another one op by op: each call waits for the work
// before it, runs, and waits for itself, so a row is that op's own time (plus
// one synchronisation, a few microseconds: small decode ops read high). For
// finding where a pass spends its time (bench/cuda_bench_cli --profile), not
// for running searches: the waits serialise the device.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/engine/batched/device_ops.hpp"

namespace midtune::engine::batched {

class ProfiledOps final : public DeviceOps {
 public:
  explicit ProfiledOps(std::unique_ptr<DeviceOps> inner) : inner_(std::move(inner)) {}

  struct Row {
    std::string op;
    std::size_t calls = 0;
    double seconds = 0.0;
  };
  // Ops by time spent since the last reset, largest first.
  std::vector<Row> rows() const;
  void reset() { totals_.clear(); }

  std::string name() const override { return inner_->name(); }
  void* allocate(std::size_t bytes) override;
  void release(void* pointer) noexcept override { inner_->release(pointer); }
  void upload(void* device, const void* host, std::size_t bytes) override;
  void download(void* host, const void* device, std::size_t bytes) override;
  void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t row_bytes,
                 int rows) override;
  void synchronize() override { inner_->synchronize(); }
  std::size_t free_bytes() const override { return inner_->free_bytes(); }

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
  std::uint16_t* bf16_scratch(std::size_t count) override { return inner_->bf16_scratch(count); }

 private:
  // Times one call: waits for earlier work on construction, for the call on destruction.
  class Scope {
   public:
    Scope(ProfiledOps& owner, std::string op);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ProfiledOps& owner_;
    std::string op_;
    std::chrono::steady_clock::time_point start_;
  };

  std::unique_ptr<DeviceOps> inner_;
  std::map<std::string, Row> totals_;
};

}  // namespace midtune::engine::batched
