#include "backends/engine/batched/batched_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "backends/engine/model_loading.hpp"
#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::batched {

namespace {

// The CUDA attention kernel keeps a head in one thread block.
constexpr std::uint32_t kMaxHeadDim = 256;

// A matrix tensor (rows x cols) dequantised row by row to float.
std::vector<float> dequantized_matrix(const GgufFile& file, const std::string& name, std::uint64_t cols,
                                      std::uint64_t rows) {
  const GgufTensorInfo& info = matrix_tensor(file, name, cols, rows);
  const std::byte* data = file.tensor_data(info).data();
  const std::size_t row_bytes = info.n_bytes / rows;
  std::vector<float> out(cols * rows);
  tbb::parallel_for(std::uint64_t{0}, rows, [&](std::uint64_t r) {
    dequantize_row(info.type->type, data + r * row_bytes, out.data() + r * cols, cols);
  });
  return out;
}

template <typename T>
DeviceBuffer<T> upload_vector(DeviceOps& device, const std::vector<T>& host, std::size_t& bytes) {
  DeviceBuffer<T> buffer(device, host.size());
  device.upload(buffer.data(), host.data(), host.size() * sizeof(T));
  bytes += host.size() * sizeof(T);
  return buffer;
}

// One or more GGUF matrices stacked by rows, as bf16 on the device. Row by
// row, without a float copy of the whole matrix (a 7B model's is 26 GB); a
// BF16 tensor's bits are taken as they are (what dequantising and rounding
// them again would give).
DeviceBuffer<std::uint16_t> upload_matrix(DeviceOps& device, const GgufFile& file,
                                          const std::vector<std::pair<std::string, std::uint64_t>>& parts,
                                          std::uint64_t cols, std::size_t& bytes) {
  std::uint64_t total_rows = 0;
  for (const auto& part : parts) total_rows += part.second;
  std::vector<std::uint16_t> all(total_rows * cols);
  std::uint64_t first_row = 0;
  for (const auto& [name, rows] : parts) {
    const GgufTensorInfo& info = matrix_tensor(file, name, cols, rows);
    const std::byte* data = file.tensor_data(info).data();
    const std::size_t row_bytes = info.n_bytes / rows;
    std::uint16_t* out = all.data() + first_row * cols;
    if (info.type->type == GgmlType::BF16) {
      std::memcpy(out, data, rows * cols * sizeof(std::uint16_t));
    } else {
      tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, rows), [&](const tbb::blocked_range<std::uint64_t>& range) {
        std::vector<float> row(cols);
        for (std::uint64_t r = range.begin(); r < range.end(); ++r) {
          dequantize_row(info.type->type, data + r * row_bytes, row.data(), cols);
          for (std::uint64_t i = 0; i < cols; ++i) out[r * cols + i] = elementwise::bf16_bits(row[i]);
        }
      });
    }
    first_row += rows;
  }
  return upload_vector(device, all, bytes);
}

}  // namespace

// ---------------------------------------------------------------- workspace

struct BatchedModel::Workspace {
  DeviceBuffer<std::int32_t> tokens;
  DeviceBuffer<double> positions;
  DeviceBuffer<float> x, xn, qkv, q_rot, attn, proj, gate, up, logits;
  DeviceBuffer<std::uint16_t> xb;
  DeviceBuffer<float> tables, scales, rows, last_row, key0_weight, factors, columns;
  DeviceBuffer<std::int32_t> gold, argmax;
  DeviceBuffer<double> gold_logprob;
  std::vector<float> host_factors;  // this layer's SIW factors of the sequence in hand (empty = none)
};

std::size_t BatchedModel::activation_bytes_per_token() const {
  const ModelConfig& c = config_;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * std::size_t{c.kv_heads} * c.head_dim;
  const std::size_t widest = std::max<std::size_t>({c.hidden, q_width, c.ffn});
  return sizeof(float) * (2 * c.hidden + std::max<std::size_t>(c.hidden, q_width) + qkv_width + 2 * q_width + 2 * c.ffn) +
         sizeof(std::uint16_t) * widest + sizeof(std::int32_t) + sizeof(double);
}

// ---------------------------------------------------------------- loading

BatchedModel::BatchedModel(const std::filesystem::path& path, DeviceOps& device)
    : device_(device), file_(std::make_unique<GgufFile>(path)), config_(read_model_config(*file_)),
      ws_(std::make_unique<Workspace>()) {
  const GgufFile& f = *file_;
  const ModelConfig& c = config_;
  check_model_shape(f, c, kMaxHeadDim);
  const std::uint64_t q_rows = std::uint64_t{c.heads} * c.head_dim;
  const std::uint64_t kv_rows = std::uint64_t{c.kv_heads} * c.head_dim;

  embedding_ = upload_vector(device_, dequantized_matrix(f, "token_embd.weight", c.hidden, c.vocab), weight_bytes_);
  output_norm_ = upload_vector(device_, vector_tensor(f, "output_norm.weight", c.hidden), weight_bytes_);
  const std::string head_name = c.tied_output ? "token_embd.weight" : "output.weight";
  lm_head_ = upload_matrix(device_, f, {{head_name, c.vocab}}, c.hidden, weight_bytes_);
  rope_inv_freq_ = upload_vector(device_, rope_inverse_frequencies(f, c), weight_bytes_);

  layers_.resize(c.layers);
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& w = layers_[l];
    w.attn_norm = upload_vector(device_, vector_tensor(f, p + "attn_norm.weight", c.hidden), weight_bytes_);
    w.ffn_norm = upload_vector(device_, vector_tensor(f, p + "ffn_norm.weight", c.hidden), weight_bytes_);
    w.qkv_bias = upload_vector(device_, qkv_bias(f, p, q_rows, kv_rows), weight_bytes_);
    w.qkv = upload_matrix(device_, f, {{p + "attn_q.weight", q_rows}, {p + "attn_k.weight", kv_rows},
                                       {p + "attn_v.weight", kv_rows}},
                          c.hidden, weight_bytes_);
    w.attn_out = upload_matrix(device_, f, {{p + "attn_output.weight", c.hidden}}, q_rows, weight_bytes_);
    w.gate = upload_matrix(device_, f, {{p + "ffn_gate.weight", c.ffn}}, c.hidden, weight_bytes_);
    w.up = upload_matrix(device_, f, {{p + "ffn_up.weight", c.ffn}}, c.hidden, weight_bytes_);
    w.down = upload_matrix(device_, f, {{p + "ffn_down.weight", c.hidden}}, c.ffn, weight_bytes_);
  }
  device_.synchronize();
}

BatchedModel::~BatchedModel() = default;

// ---------------------------------------------------------------- sequence

std::size_t BatchedSequence::cache_bytes(const ModelConfig& c, int capacity) {
  return 2 * sizeof(float) * std::size_t{c.layers} * c.kv_heads * c.head_dim * static_cast<std::size_t>(capacity);
}

BatchedSequence::BatchedSequence(BatchedModel& model, int capacity, RopeScales scales)
    : capacity_(capacity), scales_(std::move(scales)) {
  const ModelConfig& c = model.config();
  const int kv_heads = static_cast<int>(c.kv_heads);
  if (capacity <= 0) throw std::invalid_argument("BatchedSequence: capacity must be positive");
  scales_.check(c, "BatchedSequence");
  DeviceOps& device = model.device();
  layers_.resize(c.layers);
  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    LayerCache& lc = layers_[l];
    lc.slots = scales_.key_slots(l, kv_heads);
    const std::size_t size = static_cast<std::size_t>(capacity) * lc.slots * c.head_dim;
    lc.keys = DeviceBuffer<float>(device, size);
    lc.values = DeviceBuffer<float>(device, size);
  }
  positions_.reserve(static_cast<std::size_t>(capacity));
}

// ---------------------------------------------------------------- forward

void BatchedModel::forward(std::span<const SequenceCall> calls) {
  const ModelConfig& c = config_;
  const std::size_t hidden = c.hidden, ffn = c.ffn;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * std::size_t{c.kv_heads} * c.head_dim;
  Workspace& ws = *ws_;

  // The packed token matrix: call i's tokens are rows [offset[i], offset[i] + T_i).
  std::vector<std::int32_t> tokens;
  std::vector<double> positions;
  std::vector<int> offsets;
  std::vector<int> logit_rows;  // rows of the packed matrix
  for (const SequenceCall& call : calls) {
    BatchedSequence* seq = call.sequence;
    const int T = static_cast<int>(call.tokens.size());
    if (seq == nullptr) throw std::invalid_argument("forward: a call without a sequence");
    if (seq->length_ + T > seq->capacity_) {
      throw std::invalid_argument("forward: " + std::to_string(seq->length_) + " cached + " + std::to_string(T) +
                                  " new tokens exceed the sequence capacity " + std::to_string(seq->capacity_));
    }
    if (!call.positions.empty() && call.positions.size() != call.tokens.size()) {
      throw std::invalid_argument("forward: positions must be empty or one per token");
    }
    if (call.hooks != nullptr && call.hooks->on_layer_output) {
      throw std::invalid_argument("forward: on_layer_output is a CPU-engine hook (ga-run phs-search runs there)");
    }
    for (const SequenceCall& other : calls) {
      if (&other != &call && other.sequence == seq) throw std::invalid_argument("forward: a sequence twice in one call");
    }
    offsets.push_back(static_cast<int>(tokens.size()));
    for (int row : call.logit_rows) {
      if (row < 0 || row >= T) throw std::invalid_argument("forward: logit row " + std::to_string(row) + " outside the call's tokens");
      logit_rows.push_back(offsets.back() + row);
    }
    double next = seq->positions_.empty() ? 0.0 : seq->positions_.back() + 1.0;
    for (int t = 0; t < T; ++t) {
      const std::int32_t id = call.tokens[t];
      if (id < 0 || static_cast<std::uint32_t>(id) >= c.vocab) {
        throw std::invalid_argument("forward: token id " + std::to_string(id) + " outside the vocabulary of " +
                                    std::to_string(c.vocab));
      }
      tokens.push_back(id);
      positions.push_back(call.positions.empty() ? next++ : call.positions[t]);
    }
  }
  const int N = static_cast<int>(tokens.size());
  const int R = static_cast<int>(logit_rows.size());
  logit_rows_ = R;
  if (N == 0) return;

  ws.tokens.ensure(device_, N);
  ws.positions.ensure(device_, N);
  device_.upload(ws.tokens.data(), tokens.data(), tokens.size() * sizeof(std::int32_t));
  device_.upload(ws.positions.data(), positions.data(), positions.size() * sizeof(double));
  // Every sequence's RoPE scales in one upload (a row is uploaded again only
  // where an Ms-PoE prefill sets it): no transfer per layer and sequence.
  const std::size_t scales_per_call = std::size_t{c.layers} * c.heads;
  std::vector<float> all_scales;
  all_scales.reserve(calls.size() * scales_per_call);
  for (const SequenceCall& call : calls) {
    all_scales.insert(all_scales.end(), call.sequence->scales_.scale.begin(), call.sequence->scales_.scale.end());
  }
  ws.scales.ensure(device_, all_scales.size());
  device_.upload(ws.scales.data(), all_scales.data(), all_scales.size() * sizeof(float));
  const std::size_t rows = static_cast<std::size_t>(std::max(N, R));
  ws.x.ensure(device_, rows * hidden);
  ws.xn.ensure(device_, rows * std::max(hidden, q_width));
  ws.xb.ensure(device_, rows * std::max({hidden, q_width, ffn}));
  ws.qkv.ensure(device_, N * qkv_width);
  ws.q_rot.ensure(device_, N * q_width);
  ws.attn.ensure(device_, N * q_width);
  ws.proj.ensure(device_, rows * hidden);
  ws.gate.ensure(device_, N * ffn);
  ws.up.ensure(device_, N * ffn);

  // Linear layers on the whole packed matrix: activations rounded to bf16.
  auto project = [&](const float* in, int count, std::size_t inputs, const DeviceBuffer<std::uint16_t>& w,
                     std::size_t outputs, float* out) {
    device_.to_bf16(in, count * inputs, ws.xb.data());
    device_.matmul_bf16(ws.xb.data(), inputs, count, static_cast<int>(inputs), w.data(), static_cast<int>(outputs),
                        out, outputs);
  };

  device_.embed(embedding_.data(), static_cast<int>(hidden), ws.tokens.data(), N, c.embedding_scale, ws.x.data());
  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    const Layer& w = layers_[l];
    device_.rms_norm_rows(ws.x.data(), hidden, w.attn_norm.data(), N, static_cast<int>(hidden), c.rms_eps,
                          ws.xn.data(), hidden);
    project(ws.xn.data(), N, hidden, w.qkv, qkv_width, ws.qkv.data());
    if (w.qkv_bias.size() > 0) {
      device_.add_row_vector(ws.qkv.data(), qkv_width, N, w.qkv_bias.data(), static_cast<int>(qkv_width));
    }
    for (std::size_t i = 0; i < calls.size(); ++i) {
      attend_sequence(l, calls[i], offsets[i], ws.scales.data() + i * scales_per_call + std::size_t{c.heads} * l);
    }
    project(ws.attn.data(), N, q_width, w.attn_out, hidden, ws.proj.data());
    device_.add(ws.x.data(), ws.proj.data(), N * hidden);
    // Gated feed-forward block: SwiGLU, or GeGLU (gemma).
    device_.rms_norm_rows(ws.x.data(), hidden, w.ffn_norm.data(), N, static_cast<int>(hidden), c.rms_eps,
                          ws.xn.data(), hidden);
    project(ws.xn.data(), N, hidden, w.gate, ffn, ws.gate.data());
    project(ws.xn.data(), N, hidden, w.up, ffn, ws.up.data());
    if (c.ffn_activation == FfnActivation::gelu_tanh) {
      device_.gelu_tanh_mul(ws.gate.data(), ws.up.data(), ws.gate.data(), N * ffn);
    } else {
      device_.silu_mul(ws.gate.data(), ws.up.data(), ws.gate.data(), N * ffn);
    }
    project(ws.gate.data(), N, ffn, w.down, hidden, ws.proj.data());
    device_.add(ws.x.data(), ws.proj.data(), N * hidden);
  }
  for (std::size_t i = 0; i < calls.size(); ++i) {
    BatchedSequence& seq = *calls[i].sequence;
    seq.length_ += static_cast<int>(calls[i].tokens.size());
    seq.positions_.insert(seq.positions_.end(), positions.begin() + offsets[i],
                          positions.begin() + offsets[i] + static_cast<std::ptrdiff_t>(calls[i].tokens.size()));
  }

  if (R == 0) return;
  // The rows asked for, gathered, normed and projected to the vocabulary.
  for (int r = 0; r < R; ++r) {
    device_.copy_rows(ws.proj.data() + static_cast<std::size_t>(r) * hidden, sizeof(float) * hidden,
                      ws.x.data() + static_cast<std::size_t>(logit_rows[r]) * hidden, sizeof(float) * hidden,
                      sizeof(float) * hidden, 1);
  }
  device_.rms_norm_rows(ws.proj.data(), hidden, output_norm_.data(), R, static_cast<int>(hidden), c.rms_eps,
                        ws.xn.data(), hidden);
  ws.logits.ensure(device_, static_cast<std::size_t>(R) * c.vocab);
  project(ws.xn.data(), R, hidden, lm_head_, c.vocab, ws.logits.data());
}

// Attention of one sequence's rows [offset, offset + T) in layer `layer`,
// with its hooks, as Model::attention_layer and the PHS step after it.
void BatchedModel::attend_sequence(int layer, const SequenceCall& call, int offset, float* device_scales) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  BatchedSequence& seq = *call.sequence;
  const ForwardHooks* hooks = call.hooks;
  const int T = static_cast<int>(call.tokens.size());
  if (T == 0) return;
  const int heads = static_cast<int>(c.heads), kv_heads = static_cast<int>(c.kv_heads), group = heads / kv_heads;
  const int hd = static_cast<int>(c.head_dim), pairs = static_cast<int>(c.rope_dims / 2);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const std::size_t qkv_width = q_width + 2 * static_cast<std::size_t>(kv_heads) * hd;
  const int start = seq.length_;
  float* qkv = ws.qkv.data() + static_cast<std::size_t>(offset) * qkv_width;
  BatchedSequence::LayerCache& lc = seq.layers_[layer];

  // Ms-PoE (Alg. 1 lines 5-10): this layer's per-head scales, from the last
  // query's rows before RoPE, fixed for the rest of the sequence.
  if (hooks != nullptr && hooks->head_rope_scales && start == 0 &&
      (hooks->head_rope_scale_layers.empty() || hooks->head_rope_scale_layers[layer] != 0)) {
    ws.rows.ensure(device_, static_cast<std::size_t>(heads) * T);
    device_.last_query_rows(qkv, qkv_width, T, heads, kv_heads, hd, q_width, ws.rows.data());
    std::vector<float> rows(static_cast<std::size_t>(heads) * T);
    device_.download(rows.data(), ws.rows.data(), rows.size() * sizeof(float));
    const std::vector<float> scales = hooks->head_rope_scales(layer, rows, T);
    if (!scales.empty()) {
      if (scales.size() != static_cast<std::size_t>(heads)) {
        throw std::invalid_argument("forward: head_rope_scales must give one scale per head");
      }
      for (int h = 0; h < heads; ++h) {
        if (!std::isfinite(scales[h]) || scales[h] <= 0.0f) throw std::invalid_argument("forward: head scale must be > 0");
        if (lc.slots == kv_heads && scales[h] != scales[h / group * group]) {
          throw std::logic_error("forward: per-head scales in layer " + std::to_string(layer) +
                                 " need a sequence with per_head_key_slots there");
        }
      }
      std::copy(scales.begin(), scales.end(), seq.scales_.scale.begin() + static_cast<std::ptrdiff_t>(layer) * heads);
      device_.upload(device_scales, scales.data(), sizeof(float) * heads);
    }
  }

  // RoPE tables for this sequence's positions: one when every head of the
  // layer shares a scale, else one per query head (key slot s of a GQA layer
  // reads its group's first head's table).
  const float* layer_scales = seq.scales_.scale.data() + static_cast<std::size_t>(layer) * heads;
  const bool one_table = std::all_of(layer_scales, layer_scales + heads, [&](float s) { return s == layer_scales[0]; });
  const int tables = one_table ? 1 : heads;
  const std::size_t table_size = static_cast<std::size_t>(T) * pairs * 2;
  ws.tables.ensure(device_, tables * table_size);
  device_.rope_tables(ws.positions.data() + offset, T, device_scales, tables, rope_inv_freq_.data(), pairs,
                      ws.tables.data());
  const std::size_t query_stride = one_table ? 0 : table_size;
  const std::size_t key_stride = one_table ? 0 : (lc.slots == heads ? table_size : group * table_size);

  cache_values(layer, seq, qkv, T);
  cache_keys(layer, seq, qkv, T, ws.tables.data(), key_stride);
  rotate_queries(offset, T, 0, qkv, ws.tables.data(), query_stride);

  // Attention, the last query's row read out, then key 0's weight corrected
  // outside the kernel (SIW reads the row to find its factors).
  const int keys_total = start + T;
  const bool readout = hooks != nullptr && hooks->last_query_row && !hooks->last_query_row_layers.empty() &&
                       hooks->last_query_row_layers[layer] != 0;
  const bool key0 = hooks != nullptr && static_cast<bool>(hooks->key0_weight_factors);
  attend(layer, seq, offset, T, 0, key0, readout);
  if (readout) {
    std::vector<float> rows(static_cast<std::size_t>(heads) * keys_total);
    device_.download(rows.data(), ws.last_row.data(), rows.size() * sizeof(float));
    hooks->last_query_row(layer, rows, keys_total, start, T);
  }
  ws.host_factors.clear();
  if (key0) ws.host_factors = hooks->key0_weight_factors(layer, start, T);
  if (!ws.host_factors.empty()) {
    if (ws.host_factors.size() != static_cast<std::size_t>(T)) {
      throw std::invalid_argument("forward: key0_weight_factors must give one factor per token");
    }
    ws.factors.ensure(device_, T);
    device_.upload(ws.factors.data(), ws.host_factors.data(), sizeof(float) * T);
    correct_key0(layer, seq, offset, T, 0);
  }

  // PHS eq. 2-3: the channel scaled in the K rows and the last queries' Q
  // rows, keys re-cached, those rows recomputed.
  const QkChannelScaling* phs = hooks != nullptr && hooks->qk_channel_scaling ? hooks->qk_channel_scaling(layer) : nullptr;
  if (phs == nullptr) return;
  const std::size_t k_width = static_cast<std::size_t>(kv_heads) * hd;
  if (phs->q_column.size() != q_width || phs->k_column.size() != k_width || phs->channel < 0 ||
      static_cast<std::uint32_t>(phs->channel) >= c.hidden) {
    throw std::invalid_argument("forward: qk_channel_scaling does not fit the model");
  }
  const int first_query = start == 0 ? T - 1 : 0;
  ws.columns.ensure(device_, q_width + k_width);
  device_.upload(ws.columns.data(), phs->q_column.data(), sizeof(float) * q_width);
  device_.upload(ws.columns.data() + q_width, phs->k_column.data(), sizeof(float) * k_width);
  const float* normed = ws.xn.data() + static_cast<std::size_t>(offset) * c.hidden;
  device_.add_channel_column(qkv, qkv_width, T, q_width, static_cast<int>(k_width), normed, c.hidden, phs->channel,
                             phs->scale, ws.columns.data() + q_width);
  device_.add_channel_column(qkv + static_cast<std::size_t>(first_query) * qkv_width, qkv_width, T - first_query, 0,
                             static_cast<int>(q_width), normed + static_cast<std::size_t>(first_query) * c.hidden,
                             c.hidden, phs->channel, phs->scale, ws.columns.data());
  cache_keys(layer, seq, qkv, T, ws.tables.data(), key_stride);
  rotate_queries(offset, T, first_query, qkv, ws.tables.data(), query_stride);
  attend(layer, seq, offset, T, first_query, !ws.host_factors.empty(), false);
  if (!ws.host_factors.empty()) correct_key0(layer, seq, offset, T, first_query);
}

// The call's keys of every slot into the cache rows [start, start + T), then
// rotated there.
void BatchedModel::cache_keys(int layer, BatchedSequence& seq, const float* qkv, int T, const float* tables,
                              std::size_t table_stride) const {
  const ModelConfig& c = config_;
  const int heads = static_cast<int>(c.heads), kv_heads = static_cast<int>(c.kv_heads), group = heads / kv_heads;
  const std::size_t hd = c.head_dim, q_width = heads * hd, qkv_width = q_width + 2 * kv_heads * hd;
  BatchedSequence::LayerCache& lc = seq.layers_[layer];
  const std::size_t kv_ld = lc.slots * hd;
  float* dst = lc.keys.data() + static_cast<std::size_t>(seq.length_) * kv_ld;
  if (lc.slots == kv_heads) {
    device_.copy_rows(dst, kv_ld * sizeof(float), qkv + q_width, qkv_width * sizeof(float), kv_heads * hd * sizeof(float), T);
  } else {
    for (int h = 0; h < heads; ++h) {
      device_.copy_rows(dst + h * hd, kv_ld * sizeof(float), qkv + q_width + (h / group) * hd,
                        qkv_width * sizeof(float), hd * sizeof(float), T);
    }
  }
  device_.rope_rows(dst, kv_ld, T, lc.slots, static_cast<int>(hd), static_cast<int>(c.rope_dims), c.rope_pairing,
                    tables, table_stride);
}

void BatchedModel::cache_values(int layer, BatchedSequence& seq, const float* qkv, int T) const {
  const ModelConfig& c = config_;
  const int heads = static_cast<int>(c.heads), kv_heads = static_cast<int>(c.kv_heads), group = heads / kv_heads;
  const std::size_t hd = c.head_dim, q_width = heads * hd, kv_width = kv_heads * hd, qkv_width = q_width + 2 * kv_width;
  BatchedSequence::LayerCache& lc = seq.layers_[layer];
  const std::size_t kv_ld = lc.slots * hd;
  float* dst = lc.values.data() + static_cast<std::size_t>(seq.length_) * kv_ld;
  if (lc.slots == kv_heads) {
    device_.copy_rows(dst, kv_ld * sizeof(float), qkv + q_width + kv_width, qkv_width * sizeof(float),
                      kv_width * sizeof(float), T);
  } else {
    for (int h = 0; h < heads; ++h) {
      device_.copy_rows(dst + h * hd, kv_ld * sizeof(float), qkv + q_width + kv_width + (h / group) * hd,
                        qkv_width * sizeof(float), hd * sizeof(float), T);
    }
  }
}

// Rows [first, T) of the sequence's Q, rotated into q_rot.
void BatchedModel::rotate_queries(int offset, int T, int first, const float* qkv, const float* tables,
                                  std::size_t table_stride) {
  const ModelConfig& c = config_;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * std::size_t{c.kv_heads} * c.head_dim;
  float* dst = ws_->q_rot.data() + static_cast<std::size_t>(offset + first) * q_width;
  device_.copy_rows(dst, q_width * sizeof(float), qkv + static_cast<std::size_t>(first) * qkv_width,
                    qkv_width * sizeof(float), q_width * sizeof(float), T - first);
  device_.rope_rows(dst, q_width, T - first, static_cast<int>(c.heads), static_cast<int>(c.head_dim),
                    static_cast<int>(c.rope_dims), c.rope_pairing, tables + static_cast<std::size_t>(first) * c.rope_dims,
                    table_stride);
}

// Attention of the sequence's queries [first, T) over its cached keys; key
// 0's weights (heads x (T - first)) and the last query's rows where asked.
void BatchedModel::attend(int layer, BatchedSequence& seq, int offset, int T, int first, bool key0, bool last_row) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const int heads = static_cast<int>(c.heads), hd = static_cast<int>(c.head_dim);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const BatchedSequence::LayerCache& lc = seq.layers_[layer];
  const int count = T - first;
  if (key0) ws.key0_weight.ensure(device_, static_cast<std::size_t>(heads) * count);
  if (last_row) ws.last_row.ensure(device_, static_cast<std::size_t>(heads) * (seq.length_ + T));
  const std::size_t row = static_cast<std::size_t>(offset + first) * q_width;
  device_.attention(ws.q_rot.data() + row, q_width, lc.keys.data(), lc.values.data(),
                    static_cast<std::size_t>(lc.slots) * hd, count, seq.length_ + first, heads, lc.slots, hd,
                    static_cast<int>(c.sliding_window), 1.0f / std::sqrt(static_cast<float>(hd)), ws.attn.data() + row,
                    q_width, key0 ? ws.key0_weight.data() : nullptr, last_row ? ws.last_row.data() : nullptr);
}

// SIW: out += (alpha - 1) p0 v0 for the sequence's queries [first, T).
void BatchedModel::correct_key0(int layer, BatchedSequence& seq, int offset, int T, int first) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const int heads = static_cast<int>(c.heads), hd = static_cast<int>(c.head_dim);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const BatchedSequence::LayerCache& lc = seq.layers_[layer];
  device_.add_key0_correction(ws.attn.data() + static_cast<std::size_t>(offset + first) * q_width, q_width, T - first,
                              heads, lc.slots, hd, ws.key0_weight.data(), ws.factors.data() + first, lc.values.data(),
                              static_cast<std::size_t>(lc.slots) * hd);
}

// ---------------------------------------------------------------- results

std::vector<float> BatchedModel::download_logits() const {
  std::vector<float> out(static_cast<std::size_t>(logit_rows_) * config_.vocab);
  device_.download(out.data(), ws_->logits.data(), out.size() * sizeof(float));
  return out;
}

void BatchedModel::score(std::span<const std::int32_t> gold, std::vector<std::int32_t>& argmax,
                         std::vector<double>& gold_logprob) {
  Workspace& ws = *ws_;
  const int R = logit_rows_;
  if (!gold.empty() && gold.size() != static_cast<std::size_t>(R)) {
    throw std::invalid_argument("score: " + std::to_string(gold.size()) + " gold tokens for " + std::to_string(R) +
                                " logit rows");
  }
  for (std::int32_t g : gold) {
    if (g < 0 || static_cast<std::uint32_t>(g) >= config_.vocab) throw std::invalid_argument("score: gold token outside the vocabulary");
  }
  argmax.assign(static_cast<std::size_t>(R), 0);
  gold_logprob.assign(gold.empty() ? 0 : static_cast<std::size_t>(R), 0.0);
  if (R == 0) return;
  ws.argmax.ensure(device_, R);
  ws.gold_logprob.ensure(device_, R);
  if (!gold.empty()) {
    ws.gold.ensure(device_, R);
    device_.upload(ws.gold.data(), gold.data(), gold.size() * sizeof(std::int32_t));
  }
  device_.score_rows(ws.logits.data(), R, vocab(), gold.empty() ? nullptr : ws.gold.data(), ws.argmax.data(),
                     ws.gold_logprob.data());
  device_.download(argmax.data(), ws.argmax.data(), argmax.size() * sizeof(std::int32_t));
  if (!gold.empty()) device_.download(gold_logprob.data(), ws.gold_logprob.data(), gold_logprob.size() * sizeof(double));
}

}  // namespace midtune::engine::batched
