#include "backends/engine/batched/profiled_ops.hpp"

#include <algorithm>
#include <utility>

namespace midtune::engine::batched {

ProfiledOps::Scope::Scope(ProfiledOps& owner, std::string op) : owner_(owner), op_(std::move(op)) {
  owner_.inner_->synchronize();
  start_ = std::chrono::steady_clock::now();
}

ProfiledOps::Scope::~Scope() {
  owner_.inner_->synchronize();
  Row& row = owner_.totals_[op_];
  row.op = op_;
  row.calls += 1;
  row.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::vector<ProfiledOps::Row> ProfiledOps::rows() const {
  std::vector<Row> out;
  for (const auto& [op, row] : totals_) out.push_back(row);
  std::sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return out;
}

void* ProfiledOps::allocate(std::size_t bytes) {
  Scope s(*this, "allocate");
  return inner_->allocate(bytes);
}
void ProfiledOps::upload(void* device, const void* host, std::size_t bytes) {
  Scope s(*this, "upload");
  inner_->upload(device, host, bytes);
}
void ProfiledOps::download(void* host, const void* device, std::size_t bytes) {
  Scope s(*this, "download");
  inner_->download(host, device, bytes);
}
void ProfiledOps::copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                            std::size_t row_bytes, int rows) {
  Scope s(*this, "copy_rows");
  inner_->copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
}
void ProfiledOps::embed_rows(const float* table, int width, const std::int32_t* tokens, int count, float scale,
                             float* out) {
  Scope s(*this, "embed");
  inner_->embed_rows(table, width, tokens, count, scale, out);
}
void ProfiledOps::rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps,
                                float* y, std::size_t ld_y) {
  Scope s(*this, "rms_norm_rows");
  inner_->rms_norm_rows(x, ld_x, weight, rows, width, eps, y, ld_y);
}
void ProfiledOps::rms_norm_heads(float* x, std::size_t ld, int tokens, int heads, int head_dim, const float* weight,
                                 float eps) {
  Scope s(*this, "rms_norm_heads");
  inner_->rms_norm_heads(x, ld, tokens, heads, head_dim, weight, eps);
}
void ProfiledOps::to_bf16(const float* x, std::size_t count, std::uint16_t* out) {
  Scope s(*this, "to_bf16");
  inner_->to_bf16(x, count, out);
}
void ProfiledOps::matmul_bf16(const std::uint16_t* x, std::size_t ld_x, int rows, int inputs, const std::uint16_t* w,
                              int outputs, float* y, std::size_t ld_y) {
  Scope s(*this, "matmul_bf16 " + std::to_string(outputs) + "x" + std::to_string(inputs));
  inner_->matmul_bf16(x, ld_x, rows, inputs, w, outputs, y, ld_y);
}
void ProfiledOps::add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width) {
  Scope s(*this, "add_row_vector");
  inner_->add_row_vector(x, ld_x, rows, v, width);
}
void ProfiledOps::add(float* x, const float* y, std::size_t count) {
  Scope s(*this, "add");
  inner_->add(x, y, count);
}
void ProfiledOps::cap_values(float* x, std::size_t count, float cap, bool soft) {
  Scope s(*this, "cap_values");
  inner_->cap_values(x, count, cap, soft);
}
void ProfiledOps::layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows,
                                  int width, float eps, float* y, std::size_t ld_y) {
  Scope s(*this, "layer_norm_rows");
  inner_->layer_norm_rows(x, ld_x, weight, bias, rows, width, eps, y, ld_y);
}
void ProfiledOps::gated_activation(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in,
                                   int rows, int width, float* out, std::size_t ld_out) {
  Scope s(*this, activation == FfnActivation::gelu_tanh ? "gelu_tanh_mul" : "silu_mul");
  inner_->gated_activation(activation, gate, up, ld_in, rows, width, out, ld_out);
}
void ProfiledOps::rope_tables(const double* positions, int tokens, const float* scales, int tables,
                              const double* inverse_frequencies, int pairs, float* cos_sin) {
  Scope s(*this, "rope_tables");
  inner_->rope_tables(positions, tokens, scales, tables, inverse_frequencies, pairs, cos_sin);
}
void ProfiledOps::rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims,
                            RopePairing pairing, const float* cos_sin, std::size_t head_table_stride) {
  Scope s(*this, "rope_rows");
  inner_->rope_rows(x, ld_x, tokens, heads, head_dim, rope_dims, pairing, cos_sin, head_table_stride);
}
void ProfiledOps::attention_rows(const float* q, std::size_t q_ld, const float* keys, const float* values,
                            std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window,
                            float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                            float* key0_weight, float* last_row) {
  Scope s(*this, tokens == 1 ? "attention (1 query)" : "attention (prefill)");
  inner_->attention_rows(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping,
                         out, out_ld, key0_weight, last_row);
}
void ProfiledOps::add_key0_correction_rows(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads,
                                      int head_dim, const float* key0_weight, const float* factors,
                                      const float* values, std::size_t kv_ld) {
  Scope s(*this, "add_key0_correction");
  inner_->add_key0_correction_rows(out, out_ld, tokens, heads, kv_heads, head_dim, key0_weight, factors, values, kv_ld);
}
void ProfiledOps::add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                                     const float* normed, std::size_t normed_ld, int channel, double scale,
                                     const float* column) {
  Scope s(*this, "add_channel_column");
  inner_->add_channel_column(rows, ld, tokens, offset, width, normed, normed_ld, channel, scale, column);
}
void ProfiledOps::last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads, int head_dim,
                                  std::size_t k_offset, float* rows) {
  Scope s(*this, "last_query_rows");
  inner_->last_query_rows(qkv, ld, tokens, heads, kv_heads, head_dim, k_offset, rows);
}
void ProfiledOps::score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold, std::int32_t* argmax,
                             double* gold_logprob) {
  Scope s(*this, "score_rows");
  inner_->score_rows(logits, rows, vocab, gold, argmax, gold_logprob);
}

}  // namespace midtune::engine::batched
