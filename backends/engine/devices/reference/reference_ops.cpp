#include "backends/engine/devices/reference/reference_ops.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/row_updates.hpp"

namespace midtune::engine::devices {

using elementwise::bf16_value;

void ReferenceOps::embed_rows(const float* table, int width, const std::int32_t* tokens, int count, float scale,
                         float* out) {
  for (int i = 0; i < count; ++i) {
    const float* row = table + static_cast<std::size_t>(tokens[i]) * width;
    float* o = out + static_cast<std::size_t>(i) * width;
    if (scale == 1.0f) {
      std::memcpy(o, row, sizeof(float) * width);
    } else {
      for (int k = 0; k < width; ++k) o[k] = row[k] * scale;
    }
  }
}

void ReferenceOps::to_bf16(const float* x, std::size_t count, std::uint16_t* out) {
  for (std::size_t i = 0; i < count; ++i) out[i] = elementwise::bf16_bits(x[i]);
}

void ReferenceOps::matmul_bf16(const std::uint16_t* x, std::size_t ld_x, int rows, int inputs,
                               const std::uint16_t* w, int outputs, float* y, std::size_t ld_y) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Matrix xf(rows, inputs), wf(outputs, inputs);
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < inputs; ++k) xf(r, k) = bf16_value(x[r * ld_x + k]);
  }
  for (int o = 0; o < outputs; ++o) {
    for (int k = 0; k < inputs; ++k) wf(o, k) = bf16_value(w[static_cast<std::size_t>(o) * inputs + k]);
  }
  Eigen::Map<Matrix, 0, Eigen::OuterStride<>> out(y, rows, outputs, Eigen::OuterStride<>(static_cast<Eigen::Index>(ld_y)));
  out.noalias() = xf * wf.transpose();
}

std::uint16_t* ReferenceOps::bf16_scratch(std::size_t count) {
  if (bf16_scratch_.size() < count) bf16_scratch_.resize(count);
  return bf16_scratch_.data();
}

// dequantize_row's values rounded to bf16: the bf16 form's weights, by definition.
void ReferenceOps::dequantize_bf16(GgmlType type, const void* blocks, std::size_t row_bytes, int rows, int cols,
                                   std::uint16_t* out) {
  std::vector<float> row(static_cast<std::size_t>(cols));
  for (int r = 0; r < rows; ++r) {
    dequantize_row(type, static_cast<const std::byte*>(blocks) + r * row_bytes, row.data(), cols);
    for (int i = 0; i < cols; ++i) out[static_cast<std::size_t>(r) * cols + i] = elementwise::bf16_bits(row[i]);
  }
}

std::uint16_t* ReferenceOps::weight_scratch(std::size_t count) {
  if (weight_scratch_.size() < count) weight_scratch_.resize(count);
  return weight_scratch_.data();
}

// The contract's definition, through dequantize_row (not block_units.hpp,
// which the CUDA kernel runs: an independent reading of the blocks), so
// that on this device `file` gives what the bf16 form gives.
void ReferenceOps::matmul_blocks(GgmlType type, const void* blocks, std::size_t row_bytes, int outputs, int cols,
                                 const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) {
  std::uint16_t* w = weight_scratch(static_cast<std::size_t>(outputs) * cols);
  dequantize_bf16(type, blocks, row_bytes, outputs, cols, w);
  matmul_bf16(x, ld_x, rows, cols, w, outputs, y, ld_y);
}

void ReferenceOps::attention_rows(const float* q, std::size_t q_ld, const float* keys, const float* values,
                                  std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim,
                                  int window, float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                                  const AttentionReadouts& readouts) {
  const int group = heads / kv_heads;
  std::vector<float> p(static_cast<std::size_t>(past + tokens));
  for (int t = 0; t < tokens; ++t) {
    const int limit = past + t + 1;
    const int first = window > 0 ? std::max(0, limit - window) : 0;
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + t * q_ld + static_cast<std::size_t>(h) * head_dim;
      const std::size_t column = static_cast<std::size_t>(h / group) * head_dim;
      const float slope = elementwise::alibi_slope(shaping.max_alibi_bias, h, heads);
      float top = -FLT_MAX;
      for (int j = first; j < limit; ++j) {
        const float* k = keys + j * kv_ld + column;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += qh[d] * k[d];
        p[j] = scale * dot;
        if (shaping.on()) p[j] = elementwise::shape_score(p[j], shaping.softcap, slope, limit - 1 - j);
        top = std::max(top, p[j]);
      }
      float sum = 0.0f;
      for (int j = first; j < limit; ++j) sum += (p[j] = std::exp(p[j] - top));
      const float inverse = 1.0f / sum;
      float* o = out + t * out_ld + static_cast<std::size_t>(h) * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        float acc = 0.0f;
        for (int j = first; j < limit; ++j) acc += p[j] * values[j * kv_ld + column + d];
        o[d] = acc * inverse;
      }
      const std::size_t at = static_cast<std::size_t>(h) * tokens + t;
      if (readouts.key0_weight != nullptr) readouts.key0_weight[at] = first == 0 ? p[0] * inverse : 0.0f;
      if (readouts.log_sum_exp != nullptr) readouts.log_sum_exp[at] = top + std::log(sum);
      if (readouts.last_row != nullptr && t == tokens - 1) {
        float* row = readouts.last_row + static_cast<std::size_t>(h) * limit;
        for (int j = 0; j < limit; ++j) row[j] = j < first ? 0.0f : p[j] * inverse;
      }
    }
  }
}

// The cache's rows widened (exactly), then attention_rows' arithmetic: the
// CUDA kernels read each bf16 element as this float.
void ReferenceOps::attention_rows_bf16(const float* q, std::size_t q_ld, const std::uint16_t* keys,
                                       const std::uint16_t* values, std::size_t kv_ld, int tokens, int past, int heads,
                                       int kv_heads, int head_dim, int window, float scale, const ScoreShaping& shaping,
                                       float* out, std::size_t out_ld, const AttentionReadouts& readouts) {
  const std::size_t count = static_cast<std::size_t>(past + tokens) * kv_ld;
  std::vector<float> wide_keys(count), wide_values(count);
  from_bf16(keys, count, wide_keys.data());
  from_bf16(values, count, wide_values.data());
  attention_rows(q, q_ld, wide_keys.data(), wide_values.data(), kv_ld, tokens, past, heads, kv_heads, head_dim, window,
                 scale, shaping, out, out_ld, readouts);
}

void ReferenceOps::from_bf16(const std::uint16_t* x, std::size_t count, float* out) {
  for (std::size_t i = 0; i < count; ++i) out[i] = bf16_value(x[i]);
}

float* ReferenceOps::float_scratch(std::size_t count) {
  if (float_scratch_.size() < count) float_scratch_.resize(count);
  return float_scratch_.data();
}

void ReferenceOps::add_key0_correction_rows(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads,
                                       int head_dim, const float* key0_weight, const float* factors,
                                       const float* values, std::size_t kv_ld) {
  (void)kv_ld;  // only row 0 of the values is read
  engine::add_key0_correction(out, out_ld, tokens, heads, heads / kv_heads, head_dim, key0_weight,
                              static_cast<std::size_t>(tokens), factors, values, static_cast<std::size_t>(head_dim));
}

}  // namespace midtune::engine::devices
