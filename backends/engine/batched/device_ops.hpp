// The ops the batched engine (batched_model.hpp) runs, on one device's
// memory: one body per device. CudaOps (cuda_ops_device.cpp) runs them on an
// NVIDIA GPU through the kernels of backends/engine/ops/*_cuda.cu and cuBLAS;
// ReferenceOps (reference_ops.cpp) computes the same contracts on the host
// with the CPU engine's per-element arithmetic, so the batched model's code
// (packing, KV cache, hooks, scoring) runs and is tested on machines without
// a GPU, and every CUDA op is checked against it op by op where there is one.
//
// Pointers are device pointers; matrices are row-major with the stated row
// strides (in elements). Calls may be asynchronous: download() and
// synchronize() wait for what came before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/engine/gguf/rope_pairing.hpp"

namespace midtune::engine::batched {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual std::string name() const = 0;

  // ---- memory
  virtual void* allocate(std::size_t bytes) = 0;  // throws std::runtime_error naming the size when out of memory
  virtual void release(void* pointer) noexcept = 0;
  virtual void upload(void* device, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* device, std::size_t bytes) = 0;
  // `rows` rows of `row_bytes` from src (pitch in bytes) to dst.
  virtual void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t row_bytes, int rows) = 0;
  virtual void synchronize() = 0;
  // Bytes still free on the device (the host reference: what the machine has).
  virtual std::size_t free_bytes() const = 0;

  // ---- ops
  // out[i] = table[tokens[i]] * scale (table: vocab x width, fp32).
  virtual void embed(const float* table, int width, const std::int32_t* tokens, int count, float scale,
                     float* out) = 0;
  // RMSNorm (ops/rmsnorm.hpp's contract).
  virtual void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps,
                             float* y, std::size_t ld_y) = 0;
  // bf16 bits of `count` floats, rounded to nearest even (elementwise::bf16_bits).
  virtual void to_bf16(const float* x, std::size_t count, std::uint16_t* out) = 0;
  // y[rows][outputs] = x[rows][inputs] . w[outputs][inputs]^T, bf16 inputs, fp32 sums.
  virtual void matmul_bf16(const std::uint16_t* x, std::size_t ld_x, int rows, int inputs, const std::uint16_t* w,
                           int outputs, float* y, std::size_t ld_y) = 0;
  // x[r][i] += v[i] for r < rows, i < width (biases).
  virtual void add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width) = 0;
  // x[i] += y[i] (residuals).
  virtual void add(float* x, const float* y, std::size_t count) = 0;
  // out = act(gate) * up, SwiGLU (silu) or GeGLU (gelu, tanh form).
  virtual void silu_mul(const float* gate, const float* up, float* out, std::size_t count) = 0;
  virtual void gelu_tanh_mul(const float* gate, const float* up, float* out, std::size_t count) = 0;
  // RoPE tables and rotation (cuda_ops.hpp's contracts).
  virtual void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                           const double* inverse_frequencies, int pairs, float* cos_sin) = 0;
  virtual void rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims,
                         RopePairing pairing, const float* cos_sin, std::size_t head_table_stride) = 0;
  // Causal attention with the key-0 and last-row readouts (cuda_ops.hpp's contract).
  virtual void attention(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
                         int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
                         float* out, std::size_t out_ld, float* key0_weight, float* last_row) = 0;
  // SIW: out[t][h] += (factors[t] - 1) * key0_weight[h][t] * values[0][h / (heads / kv_heads)]
  // for t < tokens (factors and key0_weight hold `tokens` entries per head).
  virtual void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads,
                                   int head_dim, const float* key0_weight, const float* factors, const float* values,
                                   std::size_t kv_ld) = 0;
  // PHS eq. 2: rows[t][offset + i] += channel_delta(scale, normed[t][channel]) * column[i]
  // for t < tokens, i < width.
  virtual void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                                  const float* normed, std::size_t normed_ld, int channel, double scale,
                                  const float* column) = 0;
  // Ms-PoE: ops/last_query_rows.hpp's contract (rows: heads x tokens).
  virtual void last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads, int head_dim,
                               std::size_t k_offset, float* rows) = 0;
  // Per logit row: the first index of the largest value, and (gold != nullptr)
  // log softmax at gold[r], in double.
  virtual void score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold, std::int32_t* argmax,
                          double* gold_logprob) = 0;
};

// A typed allocation on one device, released with it.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceOps& device, std::size_t count) : device_(&device), count_(count) {
    if (count > 0) data_ = static_cast<T*>(device.allocate(count * sizeof(T)));
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      device_ = other.device_;
      data_ = other.data_;
      count_ = other.count_;
      other.data_ = nullptr;
      other.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  // Grows (contents lost) to hold at least `count` elements.
  void ensure(DeviceOps& device, std::size_t count) {
    if (count > count_ || device_ != &device) *this = DeviceBuffer(device, count);
  }
  void reset() {
    if (data_ != nullptr) device_->release(data_);
    data_ = nullptr;
    count_ = 0;
  }

 private:
  DeviceOps* device_ = nullptr;
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace midtune::engine::batched
