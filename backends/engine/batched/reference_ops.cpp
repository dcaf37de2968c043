#include "backends/engine/batched/reference_ops.hpp"

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
#include "backends/engine/ops/last_query_rows.hpp"
#include "backends/engine/ops/gated_activation.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/rope.hpp"
#include "backends/engine/ops/row_updates.hpp"
#include "backends/engine/ops/scoring.hpp"

namespace midtune::engine::batched {

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

void ReferenceOps::rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps,
                                 float* y, std::size_t ld_y) {
  engine::rms_norm_rows(x, ld_x, weight, rows, width, eps, y, ld_y, Isa::scalar);
}

void ReferenceOps::rms_norm_heads(float* x, std::size_t ld, int tokens, int heads, int head_dim, const float* weight,
                                  float eps) {
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      float* head = x + t * ld + static_cast<std::size_t>(h) * head_dim;
      engine::rms_norm_rows(head, head_dim, weight, 1, head_dim, eps, head, head_dim, Isa::scalar);
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

void ReferenceOps::add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width) {
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < width; ++i) x[r * ld_x + i] += v[i];
  }
}

void ReferenceOps::add(float* x, const float* y, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) x[i] += y[i];
}

void ReferenceOps::cap_values(float* x, std::size_t count, float cap, bool soft) {
  engine::cap_values(x, count, cap, soft);
}

void ReferenceOps::layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows,
                                   int width, float eps, float* y, std::size_t ld_y) {
  engine::layer_norm_rows(x, ld_x, weight, bias, rows, width, eps, y, ld_y);
}

void ReferenceOps::gated_activation(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in,
                                    int rows, int width, float* out, std::size_t ld_out) {
  engine::gated_activation_rows(activation, gate, up, ld_in, rows, width, out, ld_out, Isa::scalar);
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

void ReferenceOps::rope_tables(const double* positions, int tokens, const float* scales, int tables,
                               const double* inverse_frequencies, int pairs, float* cos_sin) {
  engine::rope_tables(positions, tokens, scales, tables, inverse_frequencies, pairs, cos_sin);
}

void ReferenceOps::rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims,
                             RopePairing pairing, const float* cos_sin, std::size_t head_table_stride) {
  const RopeFn rope = rope_for(Isa::scalar, pairing);
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      rope(x + t * ld_x + static_cast<std::size_t>(h) * head_dim,
           cos_sin + h * head_table_stride + static_cast<std::size_t>(t) * rope_dims, rope_dims);
    }
  }
}

void ReferenceOps::attention_rows(const float* q, std::size_t q_ld, const float* keys, const float* values,
                             std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim,
                             int window, float scale, const ScoreShaping& shaping, float* out,
                             std::size_t out_ld, float* key0_weight, float* last_row) {
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
      if (key0_weight != nullptr) key0_weight[static_cast<std::size_t>(h) * tokens + t] = first == 0 ? p[0] * inverse : 0.0f;
      if (last_row != nullptr && t == tokens - 1) {
        float* row = last_row + static_cast<std::size_t>(h) * limit;
        for (int j = 0; j < limit; ++j) row[j] = j < first ? 0.0f : p[j] * inverse;
      }
    }
  }
}

// The cache's rows widened (exactly), then attention_rows' arithmetic: the
// CUDA kernels read each bf16 element as this float.
void ReferenceOps::attention_rows_bf16(const float* q, std::size_t q_ld, const std::uint16_t* keys,
                                       const std::uint16_t* values, std::size_t kv_ld, int tokens, int past,
                                       int heads, int kv_heads, int head_dim, int window, float scale,
                                       const ScoreShaping& shaping, float* out, std::size_t out_ld,
                                       float* key0_weight, float* last_row) {
  const std::size_t count = static_cast<std::size_t>(past + tokens) * kv_ld;
  std::vector<float> wide_keys(count), wide_values(count);
  from_bf16(keys, count, wide_keys.data());
  from_bf16(values, count, wide_values.data());
  attention_rows(q, q_ld, wide_keys.data(), wide_values.data(), kv_ld, tokens, past, heads, kv_heads, head_dim, window,
                 scale, shaping, out, out_ld, key0_weight, last_row);
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

void ReferenceOps::add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                                      const float* normed, std::size_t normed_ld, int channel, double scale,
                                      const float* column) {
  engine::add_channel_column(rows, ld, tokens, offset, width, normed, normed_ld, channel, scale, column);
}

void ReferenceOps::last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads,
                                   int head_dim, std::size_t k_offset, float* rows) {
  last_query_rows_before_rope(qkv, ld, tokens, heads, kv_heads, head_dim, k_offset, rows);
}

void ReferenceOps::score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold,
                              std::int32_t* argmax, double* gold_logprob) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<std::size_t>(r) * vocab;
    argmax[r] = argmax_row(row, vocab);
    if (gold != nullptr) gold_logprob[r] = log_softmax_at(row, vocab, gold[r]);
  }
}

}  // namespace midtune::engine::batched
