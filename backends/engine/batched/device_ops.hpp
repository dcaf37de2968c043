// The GPU family of devices: a Device (../device.hpp) whose weights are
// bf16 matrices and whose KV cache is row-major fp32, built from a few
// pointer-level kernels each body implements: CudaOps (cuda_ops_device.cpp)
// runs them on an NVIDIA GPU through the kernels of
// backends/engine/ops/*_cuda.cu and cuBLAS; ReferenceOps (reference_ops.cpp)
// computes the same contracts on the host with the CPU engine's
// per-element arithmetic, so the model's code runs and is tested in this
// form on machines without a GPU, and every CUDA op is checked against it op
// by op where there is one. The weight, embedding and KV-cache parts of
// Device are written here once, in terms of those kernels.
//
// KV cache: per layer, keys (already rotated) and values in fp32,
// row-major [position][slot x head_dim]; in a layer with per-head slots the
// values are repeated per head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/engine/device.hpp"

namespace midtune::engine::batched {

class DeviceOps : public Device {
 public:
  // The CUDA attention kernel keeps a head in one thread block.
  std::uint32_t max_head_dim() const override { return 256; }

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
                 float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
                 float* last_row) override;
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
                              int window, float scale, const ScoreShaping& shaping, float* out,
                              std::size_t out_ld, float* key0_weight, float* last_row) = 0;
  // SIW: out[t][h] += (factors[t] - 1) * key0_weight[h][t] * values[0][h / (heads / kv_heads)]
  // for t < tokens (factors and key0_weight hold `tokens` entries per head).
  virtual void add_key0_correction_rows(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads,
                                        int head_dim, const float* key0_weight, const float* factors,
                                        const float* values, std::size_t kv_ld) = 0;
  // `count` bf16 values of device memory for a product's input, the body's
  // own (valid until the next call).
  virtual std::uint16_t* bf16_scratch(std::size_t count) = 0;

 protected:
  // The row-major keys and values of a cache this family made.
  struct KvRows {
    float* keys;
    float* values;
  };
  static KvRows rows_of(const LayerKv& kv);

 private:
  void copy_to_slots(const LayerKv& kv, float* cache, int start, const float* rows, std::size_t ld, int tokens);
};

}  // namespace midtune::engine::batched
