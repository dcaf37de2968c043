// CUDA bodies of the in-place row updates (row_updates.hpp; SIW's key-0
// correction: cuda_ops.hpp): biases, residuals, SIW's correction and
// PHS's channel column, and the soft-cap / clamp of values, one thread per updated element, with the
// per-element arithmetic of elementwise.hpp where there is any; and bf16
// widened to float (a bf16 KV cache's row that SIW's correction reads).
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/row_updates.hpp"

namespace midtune::engine::cuda {

namespace {

__global__ void add_row_vector_kernel(float* x, std::size_t ld_x, std::size_t total, const float* v, int width) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const std::size_t r = i / width, k = i % width;
  x[r * ld_x + k] += v[k];
}

__global__ void add_kernel(float* x, const float* y, std::size_t count) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) x[i] += y[i];
}

__global__ void cap_values_kernel(float* x, std::size_t count, float cap, bool soft) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) x[i] = elementwise::cap_value(x[i], cap, soft);
}

__global__ void from_bf16_kernel(const std::uint16_t* x, std::size_t count, float* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = elementwise::bf16_value(x[i]);
}

// One thread per (token, head, dimension).
__global__ void key0_correction_kernel(float* out, std::size_t out_ld, int tokens, int heads, int group, int head_dim,
                                       const float* key0_weight, const float* factors, const float* values) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t total = static_cast<std::size_t>(tokens) * heads * head_dim;
  if (i >= total) return;
  const int d = static_cast<int>(i % head_dim);
  const int h = static_cast<int>((i / head_dim) % heads);
  const int t = static_cast<int>(i / (static_cast<std::size_t>(head_dim) * heads));
  const float alpha = factors[t];
  if (alpha == 1.0f) return;
  const float step = (alpha - 1.0f) * key0_weight[static_cast<std::size_t>(h) * tokens + t];
  out[t * out_ld + static_cast<std::size_t>(h) * head_dim + d] += step * values[static_cast<std::size_t>(h / group) * head_dim + d];
}

__global__ void channel_column_kernel(float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                                      const float* normed, std::size_t normed_ld, int channel, double scale,
                                      const float* column) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(tokens) * width) return;
  const std::size_t t = i / width, k = i % width;
  const float delta = elementwise::channel_delta(scale, normed[t * normed_ld + channel]);
  rows[t * ld + offset + k] += delta * column[k];
}

}  // namespace

void add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width, void* stream) {
  if (rows < 0 || width <= 0 || ld_x < static_cast<std::size_t>(width)) {
    throw std::invalid_argument("add row vector (cuda): " + std::to_string(rows) + " rows of " + std::to_string(width));
  }
  const std::size_t total = static_cast<std::size_t>(rows) * width;
  if (total == 0) return;
  add_row_vector_kernel<<<blocks_for(total), kThreadsPerBlock, 0, as_stream(stream)>>>(x, ld_x, total, v, width);
  check_launch("add row vector");
}

void add(float* x, const float* y, std::size_t count, void* stream) {
  if (count == 0) return;
  add_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(x, y, count);
  check_launch("add");
}

void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads, int head_dim,
                         const float* key0_weight, const float* factors, const float* values, void* stream) {
  if (tokens < 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || head_dim <= 0 ||
      out_ld < static_cast<std::size_t>(heads) * head_dim) {
    throw std::invalid_argument("key-0 correction (cuda): " + std::to_string(tokens) + " tokens, heads " +
                                std::to_string(heads) + "/" + std::to_string(kv_heads));
  }
  const std::size_t total = static_cast<std::size_t>(tokens) * heads * head_dim;
  if (total == 0) return;
  key0_correction_kernel<<<blocks_for(total), kThreadsPerBlock, 0, as_stream(stream)>>>(
      out, out_ld, tokens, heads, heads / kv_heads, head_dim, key0_weight, factors, values);
  check_launch("key-0 correction");
}

void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width, const float* normed,
                        std::size_t normed_ld, int channel, double scale, const float* column, void* stream) {
  if (tokens < 0 || width <= 0 || channel < 0 || ld < offset + width) {
    throw std::invalid_argument("channel column (cuda): " + std::to_string(tokens) + " rows, width " +
                                std::to_string(width) + " at " + std::to_string(offset));
  }
  const std::size_t total = static_cast<std::size_t>(tokens) * width;
  if (total == 0) return;
  channel_column_kernel<<<blocks_for(total), kThreadsPerBlock, 0, as_stream(stream)>>>(
      rows, ld, tokens, offset, width, normed, normed_ld, channel, scale, column);
  check_launch("channel column");
}

void from_bf16(const std::uint16_t* x, std::size_t count, float* out, void* stream) {
  if (count == 0) return;
  from_bf16_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(x, count, out);
  check_launch("from_bf16");
}

void cap_values(float* x, std::size_t count, float cap, bool soft, void* stream) {
  if (!(cap > 0.0f)) throw std::invalid_argument("cap_values (cuda): cap " + std::to_string(cap) + " must be > 0");
  if (count == 0) return;
  cap_values_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(x, count, cap, soft);
  check_launch("cap_values");
}

}  // namespace midtune::engine::cuda
