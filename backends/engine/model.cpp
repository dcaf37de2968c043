#include "backends/engine/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "backends/engine/model_loading.hpp"
#include "backends/engine/ops/attention.hpp"
#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/geglu.hpp"
#include "backends/engine/ops/last_query_rows.hpp"
#include "backends/engine/ops/matmul.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/rope.hpp"
#include "backends/engine/ops/row_updates.hpp"
#include "backends/engine/ops/swiglu.hpp"

namespace midtune::engine {

// ---------------------------------------------------------------- scales

RopeScales RopeScales::ones(int layers, int heads) {
  RopeScales s;
  s.layers = layers;
  s.heads = heads;
  s.scale.assign(static_cast<std::size_t>(layers) * heads, 1.0f);
  return s;
}

bool RopeScales::all_ones() const {
  return std::all_of(scale.begin(), scale.end(), [](float v) { return v == 1.0f; });
}

void RopeScales::check(const ModelConfig& c, const char* who) const {
  const std::string w = who;
  if (layers != static_cast<int>(c.layers) || heads != static_cast<int>(c.heads) ||
      scale.size() != static_cast<std::size_t>(c.layers) * c.heads) {
    throw std::invalid_argument(w + ": RoPE scales are " + std::to_string(layers) + " x " + std::to_string(heads) +
                                ", the model has " + std::to_string(c.layers) + " layers x " +
                                std::to_string(c.heads) + " heads");
  }
  for (float s : scale) {
    if (!std::isfinite(s) || s <= 0.0f) {
      throw std::invalid_argument(w + ": RoPE scale " + std::to_string(s) + " must be finite and > 0");
    }
  }
  if (!per_head_key_slots.empty() && per_head_key_slots.size() != c.layers) {
    throw std::invalid_argument(w + ": per_head_key_slots has " + std::to_string(per_head_key_slots.size()) +
                                " entries, the model has " + std::to_string(c.layers) + " layers");
  }
}

int RopeScales::key_slots(int layer, int kv_heads) const {
  const int group = heads / kv_heads;
  bool uniform_groups = per_head_key_slots.empty() || per_head_key_slots[static_cast<std::size_t>(layer)] == 0;
  for (int h = 0; h < heads; ++h) uniform_groups = uniform_groups && at(layer, h) == at(layer, h / group * group);
  return uniform_groups ? kv_heads : heads;
}

// ---------------------------------------------------------------- loading

namespace {

// attend splits a decode step's tiles across threads (three parallel steps
// instead of one) from this many cached keys on: a model with fewer key
// slots than threads otherwise leaves threads idle through the attention,
// while below a few hundred keys the extra parallel steps cost more than the
// idle thread (SmolLM2 decode: slower split at 32 keys, even at 128, faster
// from 512 on).
constexpr int kSplitAttentionKeys = 256;

MatrixPart matrix_part(const GgufFile& file, const std::string& name, std::uint64_t cols,
                       std::uint64_t rows) {
  const GgufTensorInfo& info = matrix_tensor(file, name, cols, rows);
  return MatrixPart{info.type->type, file.tensor_data(info).data(), static_cast<int>(rows)};
}

WeightMatrix pack_checked(const GgufFile& file, const std::vector<MatrixPart>& parts, int cols,
                          const std::string& what, bool fp32_weights) {
  try {
    return WeightMatrix::from_parts(parts, cols, fp32_weights);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(file.path().string() + ": " + what + ": " + e.what());
  }
}

}  // namespace

Model::Model(const std::filesystem::path& path, Isa isa, bool fp32_weights)
    : file_(std::make_unique<GgufFile>(path)), config_(read_model_config(*file_)), isa_(isa) {
  const GgufFile& f = *file_;
  const ModelConfig& c = config_;
  // The CPU attention bodies take head dimensions up to 512.
  check_model_shape(f, c, 512);
  if (!isa_available(isa_)) {
    throw std::invalid_argument(std::string("engine: ISA ") + to_string(isa_) + " not available on this CPU");
  }
  const std::uint64_t q_rows = std::uint64_t{c.heads} * c.head_dim;
  const std::uint64_t kv_rows = std::uint64_t{c.kv_heads} * c.head_dim;

  const GgufTensorInfo& embd = matrix_tensor(f, "token_embd.weight", c.hidden, c.vocab);
  embedding_type_ = embd.type->type;
  embedding_data_ = f.tensor_data(embd).data();
  embedding_row_bytes_ = embd.n_bytes / c.vocab;
  output_norm_ = vector_tensor(f, "output_norm.weight", c.hidden);
  const std::string head_name = c.tied_output ? "token_embd.weight" : "output.weight";
  lm_head_ = pack_checked(f, {matrix_part(f, head_name, c.hidden, c.vocab)}, c.hidden, head_name, fp32_weights);

  rope_inv_freq_ = rope_inverse_frequencies(f, c);
  layers_.resize(c.layers);
  tbb::parallel_for(0, static_cast<int>(c.layers), [&](int l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& w = layers_[l];
    w.attn_norm = vector_tensor(f, p + "attn_norm.weight", c.hidden);
    w.ffn_norm = vector_tensor(f, p + "ffn_norm.weight", c.hidden);
    w.qkv_bias = qkv_bias(f, p, q_rows, kv_rows);
    w.qkv = pack_checked(f,
                         {matrix_part(f, p + "attn_q.weight", c.hidden, q_rows),
                          matrix_part(f, p + "attn_k.weight", c.hidden, kv_rows),
                          matrix_part(f, p + "attn_v.weight", c.hidden, kv_rows)},
                         c.hidden, p + "attn_q/k/v", fp32_weights);
    w.attn_out = pack_checked(f, {matrix_part(f, p + "attn_output.weight", q_rows, c.hidden)},
                              static_cast<int>(q_rows), p + "attn_output", fp32_weights);
    w.gate_up = pack_checked(f,
                             {matrix_part(f, p + "ffn_gate.weight", c.hidden, c.ffn),
                              matrix_part(f, p + "ffn_up.weight", c.hidden, c.ffn)},
                             c.hidden, p + "ffn_gate/up", fp32_weights);
    w.down = pack_checked(f, {matrix_part(f, p + "ffn_down.weight", c.ffn, c.hidden)}, c.ffn,
                          p + "ffn_down", fp32_weights);
  });
}

Model::~Model() = default;

void Model::embed(std::int32_t token, float* out) const {
  dequantize_row(embedding_type_, embedding_data_ + static_cast<std::size_t>(token) * embedding_row_bytes_,
                 out, config_.hidden);
  if (config_.embedding_scale != 1.0f) {
    for (std::uint32_t i = 0; i < config_.hidden; ++i) out[i] *= config_.embedding_scale;
  }
}

// ---------------------------------------------------------------- sequence

Sequence::Sequence(const Model& model, int capacity, RopeScales scales)
    : capacity_(capacity), scales_(std::move(scales)) {
  const ModelConfig& c = model.config();
  const int heads = static_cast<int>(c.heads), kv_heads = static_cast<int>(c.kv_heads);
  if (capacity <= 0) throw std::invalid_argument("Sequence: capacity must be positive");
  scales_.check(c, "Sequence");
  const int group = heads / kv_heads;
  layers_.resize(c.layers);
  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    LayerCache& lc = layers_[l];
    lc.key_slots = scales_.key_slots(l, kv_heads);
    const bool uniform_groups = lc.key_slots == kv_heads;
    lc.slot_of_head.resize(heads);
    lc.slot_scale.resize(lc.key_slots);
    for (int h = 0; h < heads; ++h) {
      lc.slot_of_head[h] = uniform_groups ? h / group : h;
      lc.slot_scale[lc.slot_of_head[h]] = scales_.at(l, h);
    }
    lc.kt.resize(static_cast<std::size_t>(lc.key_slots) * c.head_dim * key_capacity());
    lc.v.resize(static_cast<std::size_t>(kv_heads) * capacity * c.head_dim);
  }
  positions_.reserve(capacity);
}

void Sequence::truncate(int length) {
  if (length < 0 || length > length_) {
    throw std::invalid_argument("Sequence::truncate: " + std::to_string(length) + " outside [0, " +
                                std::to_string(length_) + "]");
  }
  length_ = length;
  positions_.resize(static_cast<std::size_t>(length));
}

// ---------------------------------------------------------------- forward

struct Model::Workspace {
  AlignedBuffer<float> x, xn, qkv, q_rot, attn, proj, ffn, act, last_rows;
  AlignedBuffer<float> key0_weight;  // each query's weight on key 0 (heads x tokens)
  QuantizedRows xq;
  struct RopeTable {
    float scale;
    AlignedBuffer<float> cos_sin;  // [token][rope_dims/2][2]
  };
  std::vector<RopeTable> rope_tables;
  tbb::enumerable_thread_specific<AlignedBuffer<float>> scratch;
  AlignedBuffer<float> split_scratch;  // attend's split decode path: one tile's scratch per job
  std::vector<float> key0_factors;  // SIW: this layer's factor per query token (empty = none)

  // The RoPE table of `scale` for this call's positions, built on first use:
  // angle_i = (pos / scale) * inv_freq[i] (the model's frequencies).
  const float* rope_table(float scale, const double* positions, int T, std::span<const double> inv_freq) {
    for (const auto& t : rope_tables) {
      if (t.scale == scale) return t.cos_sin.data();
    }
    const int half = static_cast<int>(inv_freq.size());
    RopeTable table{scale, AlignedBuffer<float>(static_cast<std::size_t>(T) * half * 2)};
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) {
        float* entry = &table.cos_sin[(static_cast<std::size_t>(t) * half + i) * 2];
        elementwise::rope_cos_sin(positions[t], scale, inv_freq[i], entry, entry + 1);
      }
    }
    rope_tables.push_back(std::move(table));
    return rope_tables.back().cos_sin.data();
  }
  const float* rope_table(float scale) const {
    for (const auto& t : rope_tables) {
      if (t.scale == scale) return t.cos_sin.data();
    }
    throw std::logic_error("attention: no RoPE table for a scale in use");
  }
};

namespace {

void add_rows(float* x, const float* y, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) x[i] += y[i];
}

}  // namespace

std::vector<float> Model::forward(Sequence& seq, std::span<const std::int32_t> tokens,
                                  std::span<const double> positions, std::span<const int> logit_rows,
                                  const ForwardHooks* hooks) const {
  const int n = static_cast<int>(tokens.size());
  if (seq.layers_.size() != config_.layers) throw std::invalid_argument("forward: sequence of another model");
  if (seq.length_ + n > seq.capacity_) {
    throw std::invalid_argument("forward: " + std::to_string(seq.length_ + n) +
                                " tokens exceed the sequence capacity " + std::to_string(seq.capacity_));
  }
  for (std::int32_t t : tokens) {
    if (t < 0 || t >= vocab()) {
      throw std::invalid_argument("forward: token id " + std::to_string(t) + " outside the vocabulary of " +
                                  std::to_string(vocab()));
    }
  }
  for (int r : logit_rows) {
    if (r < 0 || r >= n) throw std::invalid_argument("forward: logit row " + std::to_string(r) + " out of range");
  }
  if (!positions.empty() && static_cast<int>(positions.size()) != n) {
    throw std::invalid_argument("forward: " + std::to_string(positions.size()) + " positions for " +
                                std::to_string(n) + " tokens");
  }
  if (hooks != nullptr && !hooks->last_query_row_layers.empty() &&
      hooks->last_query_row_layers.size() != config_.layers) {
    throw std::invalid_argument("forward: last_query_row_layers needs one entry per layer");
  }
  std::vector<double> pos(positions.begin(), positions.end());
  if (pos.empty()) {
    pos.resize(n);
    for (int i = 0; i < n; ++i) pos[i] = seq.last_position() + 1.0 + i;
  }

  std::vector<float> logits(logit_rows.size() * static_cast<std::size_t>(vocab()));
  Workspace ws;
  // Interventions that read the last query's row over all keys see the whole call at once.
  const int chunk = hooks != nullptr && hooks->whole_prompt ? std::max(n, 1) : prefill_chunk;
  for (int c0 = 0; c0 < n; c0 += chunk) {
    const int c1 = std::min(n, c0 + chunk);
    std::vector<int> local_rows;
    std::vector<std::size_t> out_index;
    for (std::size_t i = 0; i < logit_rows.size(); ++i) {
      if (logit_rows[i] >= c0 && logit_rows[i] < c1) {
        local_rows.push_back(logit_rows[i] - c0);
        out_index.push_back(i);
      }
    }
    std::vector<float> chunk_logits(local_rows.size() * static_cast<std::size_t>(vocab()));
    forward_chunk(seq, tokens.subspan(c0, c1 - c0), pos.data() + c0, local_rows, chunk_logits.data(),
                  hooks, ws);
    for (std::size_t i = 0; i < local_rows.size(); ++i) {
      std::copy_n(chunk_logits.data() + i * vocab(), vocab(), logits.data() + out_index[i] * vocab());
    }
  }
  return logits;
}

void Model::forward_chunk(Sequence& seq, std::span<const std::int32_t> tokens, const double* positions,
                          std::span<const int> logit_rows, float* logits, const ForwardHooks* hooks,
                          Workspace& ws) const {
  const ModelConfig& c = config_;
  const int T = static_cast<int>(tokens.size());
  const std::size_t hidden = c.hidden, ffn = c.ffn;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * std::size_t{c.kv_heads} * c.head_dim;
  ws.x.ensure(T * hidden);
  ws.xn.ensure(T * std::max(hidden, q_width));
  ws.qkv.ensure(T * qkv_width);
  ws.q_rot.ensure(T * q_width);
  ws.attn.ensure(T * q_width);
  ws.proj.ensure(T * hidden);
  ws.ffn.ensure(T * 2 * ffn);
  ws.act.ensure(T * ffn);

  // RoPE tables, one per distinct scale in use (usually just 1.0).
  ws.rope_tables.clear();
  for (float s : seq.scales_.scale) ws.rope_table(s, positions, T, rope_inv_freq_);

  for (int t = 0; t < T; ++t) embed(tokens[t], ws.x.data() + t * hidden);

  const GeluMulFn gelu = gelu_mul_for(isa_);
  // Row-wise ops go parallel only for prefill; a decode step is too small
  // to pay for the task overhead.
  const auto rows_partitioner = [&](int grain) { return tbb::blocked_range<int>(0, T, std::max(grain, T < 16 ? T : 1)); };
  auto norm_rows = [&](const std::vector<float>& weight) {
    tbb::parallel_for(rows_partitioner(16), [&](const tbb::blocked_range<int>& r) {
      rms_norm_rows(ws.x.data() + r.begin() * hidden, hidden, weight.data(), r.size(), static_cast<int>(hidden),
                    c.rms_eps, ws.xn.data() + r.begin() * hidden, hidden, isa_);
    });
  };
  auto project = [&](const WeightMatrix& w, const float* in, std::size_t in_width, float* out) {
    w.matmul(in, T, in_width, out, w.rows(), ws.xq, isa_);
  };

  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    const LayerWeights& w = layers_[l];
    // Attention block.
    norm_rows(w.attn_norm);
    project(w.qkv, ws.xn.data(), hidden, ws.qkv.data());
    if (!w.qkv_bias.empty()) {
      for (int t = 0; t < T; ++t) add_rows(ws.qkv.data() + t * qkv_width, w.qkv_bias.data(), qkv_width);
    }
    attention_layer(l, seq, T, positions, ws, hooks);
    const QkChannelScaling* phs = hooks != nullptr && hooks->qk_channel_scaling ? hooks->qk_channel_scaling(l) : nullptr;
    if (phs != nullptr) {
      const int first_query = seq.length_ == 0 ? T - 1 : 0;
      scale_qk_channel(*phs, T, first_query, ws);
      recompute_last_rows(l, seq, T, first_query, ws);  // PHS eq. 3
    }
    project(w.attn_out, ws.attn.data(), q_width, ws.proj.data());
    add_rows(ws.x.data(), ws.proj.data(), T * hidden);
    // Gated feed-forward block: SwiGLU, or GeGLU (gemma).
    norm_rows(w.ffn_norm);
    project(w.gate_up, ws.xn.data(), hidden, ws.ffn.data());
    tbb::parallel_for(rows_partitioner(8), [&](const tbb::blocked_range<int>& r) {
      for (int t = r.begin(); t < r.end(); ++t) {
        const float* row = ws.ffn.data() + t * 2 * ffn;
        if (c.ffn_activation == FfnActivation::gelu_tanh) {
          gelu(row, row + ffn, ws.act.data() + t * ffn, ffn);
        } else {
          silu_mul(row, row + ffn, ws.act.data() + t * ffn, ffn, isa_);
        }
      }
    });
    project(w.down, ws.act.data(), ffn, ws.proj.data());
    add_rows(ws.x.data(), ws.proj.data(), T * hidden);
    if (hooks != nullptr && hooks->on_layer_output) {
      hooks->on_layer_output(l, seq.length_, std::span<const float>(ws.x.data(), T * hidden), T);
    }
  }
  seq.length_ += T;
  seq.positions_.insert(seq.positions_.end(), positions, positions + T);

  if (logit_rows.empty()) return;
  const int rows = static_cast<int>(logit_rows.size());
  for (int i = 0; i < rows; ++i) {
    rms_norm_rows(ws.x.data() + logit_rows[i] * hidden, hidden, output_norm_.data(), 1, static_cast<int>(hidden),
                  c.rms_eps, ws.xn.data() + i * hidden, hidden, isa_);
  }
  lm_head_.matmul(ws.xn.data(), rows, hidden, logits, static_cast<std::size_t>(vocab()), ws.xq, isa_);
}

void Model::attention_layer(int layer, Sequence& seq, int T, const double* positions, Workspace& ws,
                            const ForwardHooks* hooks) const {
  const ModelConfig& c = config_;
  const int hd = static_cast<int>(c.head_dim), heads = static_cast<int>(c.heads);
  const int kv_heads = static_cast<int>(c.kv_heads);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const std::size_t kv_width = static_cast<std::size_t>(kv_heads) * hd;
  const std::size_t qkv_width = q_width + 2 * kv_width;
  const std::size_t cap = seq.capacity_;
  const int start = seq.length_;
  Sequence::LayerCache& lc = seq.layers_[layer];
  if (hooks != nullptr && hooks->head_rope_scales && start == 0 &&
      (hooks->head_rope_scale_layers.empty() || hooks->head_rope_scale_layers[layer] != 0)) {
    apply_head_rope_scales(layer, seq, T, positions, ws, *hooks);
  }

  // Cache values and rotated, transposed keys; rotate the queries.
  for (int t = 0; t < T; ++t) {
    const float* row = ws.qkv.data() + t * qkv_width;
    for (int g = 0; g < kv_heads; ++g) {
      std::memcpy(lc.v.data() + (g * cap + start + t) * hd, row + q_width + kv_width + g * hd, sizeof(float) * hd);
    }
  }
  cache_keys(layer, seq, T, ws);
  rotate_queries(layer, seq, T, 0, ws);

  // Attention, the last query's row read out, then key 0's weight corrected
  // outside the kernel (SIW reads the row to find its factors).
  const int keys_total = start + T;
  const bool readout = hooks != nullptr && hooks->last_query_row && !hooks->last_query_row_layers.empty() &&
                       hooks->last_query_row_layers[layer] != 0;
  const bool key0 = hooks != nullptr && static_cast<bool>(hooks->key0_weight_factors);
  if (readout) ws.last_rows.ensure(static_cast<std::size_t>(heads) * keys_total);
  attend(layer, seq, T, 0, key0, readout, ws);
  if (readout) {
    hooks->last_query_row(layer,
                          std::span<const float>(ws.last_rows.data(), static_cast<std::size_t>(heads) * keys_total),
                          keys_total, start, T);
  }
  ws.key0_factors.clear();
  if (key0) ws.key0_factors = hooks->key0_weight_factors(layer, start, T);
  if (!ws.key0_factors.empty()) {
    if (ws.key0_factors.size() != static_cast<std::size_t>(T)) {
      throw std::invalid_argument("forward: key0_weight_factors must give one factor per token");
    }
    correct_key0_weight(layer, seq, T, 0, ws);
  }
}

void Model::cache_keys(int layer, Sequence& seq, int T, Workspace& ws) const {
  const ModelConfig& c = config_;
  const int hd = static_cast<int>(c.head_dim), heads = static_cast<int>(c.heads);
  const int kv_heads = static_cast<int>(c.kv_heads), group = heads / kv_heads;
  const int half = static_cast<int>(c.rope_dims / 2);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const std::size_t qkv_width = q_width + 2 * static_cast<std::size_t>(kv_heads) * hd;
  const int start = seq.length_;
  Sequence::LayerCache& lc = seq.layers_[layer];
  const RopeFn rope = rope_for(isa_, c.rope_pairing);
  tbb::parallel_for(0, lc.key_slots, [&](int slot) {
    float key[512];
    const int g = lc.key_slots == kv_heads ? slot : slot / group;
    const float* table = ws.rope_table(lc.slot_scale[slot]);
    float* kt = lc.kt.data() + static_cast<std::size_t>(slot) * hd * seq.key_capacity();
    for (int t = 0; t < T; ++t) {
      std::memcpy(key, ws.qkv.data() + t * qkv_width + q_width + g * hd, sizeof(float) * hd);
      rope(key, table + static_cast<std::size_t>(t) * half * 2, static_cast<int>(c.rope_dims));
      for (int i = 0; i < hd; ++i) kt[key_offset(start + t, i, hd)] = key[i];
    }
  });
}

void Model::rotate_queries(int layer, const Sequence& seq, int T, int first, Workspace& ws) const {
  const ModelConfig& c = config_;
  const int hd = static_cast<int>(c.head_dim), heads = static_cast<int>(c.heads);
  const int half = static_cast<int>(c.rope_dims / 2);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const std::size_t qkv_width = q_width + 2 * static_cast<std::size_t>(c.kv_heads) * hd;
  const RopeFn rope = rope_for(isa_, c.rope_pairing);
  tbb::parallel_for(0, heads, [&](int h) {
    const float* table = ws.rope_table(seq.scales_.at(layer, h));
    for (int t = first; t < T; ++t) {
      float* q = ws.q_rot.data() + (static_cast<std::size_t>(h) * T + t) * hd;
      std::memcpy(q, ws.qkv.data() + t * qkv_width + h * hd, sizeof(float) * hd);
      rope(q, table + static_cast<std::size_t>(t) * half * 2, static_cast<int>(c.rope_dims));
    }
  });
}

// Attention of the call's queries [first, T) over the cached keys. Records
// each query's weight on key 0 (heads x T) and the last query's rows where
// asked.
void Model::attend(int layer, Sequence& seq, int T, int first, bool want_key0_weights, bool want_last_row,
                   Workspace& ws) const {
  const ModelConfig& c = config_;
  const int hd = static_cast<int>(c.head_dim), heads = static_cast<int>(c.heads);
  const int kv_heads = static_cast<int>(c.kv_heads), group = heads / kv_heads;
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const std::size_t cap = seq.capacity_;
  const int start = seq.length_;
  const int keys_total = start + T;
  Sequence::LayerCache& lc = seq.layers_[layer];

  // Work items: one key slot's query heads x a run of positions, so each
  // key / value row loaded serves every query head that reads it.
  std::vector<std::vector<int>> heads_of_slot(lc.key_slots);
  for (int h = 0; h < heads; ++h) heads_of_slot[lc.slot_of_head[h]].push_back(h);
  const int slot_heads = static_cast<int>(heads_of_slot[0].size());
  const int run = std::max(1, kAttentionTile / slot_heads);
  const int count = T - first;
  const int runs = (count + run - 1) / run;
  const AttentionFn attend_tile = attention_for(isa_);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (want_key0_weights) ws.key0_weight.ensure(static_cast<std::size_t>(heads) * T);
  // Job `job`'s tile: key slot job / runs, run job % runs of positions.
  const auto make_tile = [&](int job, AttentionTile& tile, std::size_t* key0_index) {
    const int slot = job / runs;
    const int t0 = first + (job % runs) * run;
    const int t1 = std::min(T, t0 + run);
    for (int h : heads_of_slot[slot]) {
      for (int t = t0; t < t1; ++t) {
        const int r = tile.count++;
        tile.q[r] = ws.q_rot.data() + (static_cast<std::size_t>(h) * T + t) * hd;
        tile.out[r] = ws.attn.data() + t * q_width + h * hd;
        tile.limit[r] = start + t + 1;
        // A sliding window: the query sees its last `sliding_window` keys.
        tile.first[r] = c.sliding_window == 0 ? 0 : std::max(0, tile.limit[r] - static_cast<int>(c.sliding_window));
        key0_index[r] = static_cast<std::size_t>(h) * T + t;
        if (want_last_row && t == T - 1) {
          tile.probs_out[r] = ws.last_rows.data() + static_cast<std::size_t>(h) * keys_total;
        }
      }
    }
    const int kv_head = heads_of_slot[slot][0] / group;
    return KeyValueView{lc.kt.data() + static_cast<std::size_t>(slot) * hd * seq.key_capacity(),
                        lc.v.data() + static_cast<std::size_t>(kv_head) * cap * hd, static_cast<std::size_t>(hd), hd};
  };
  const int jobs = lc.key_slots * runs;
  const AttentionParts* parts = attention_parts_for(isa_);
  const int threads = tbb::this_task_arena::max_concurrency();
  if (parts != nullptr && hd % kKeyBlock == 0 && jobs % threads != 0 && jobs < 2 * threads &&
      keys_total >= kSplitAttentionKeys) {
    // A decode step: too few tiles (3 key slots on 2 threads leave one idle
    // a third of the time) to keep the threads busy over long caches, so
    // the tiles' keys are split for the scores and their output dims for
    // p V. Bit-identical to the whole body (ops/attention.hpp).
    struct Job {
      AttentionTile tile;
      KeyValueView kv;
      int max_limit = 0;
      float key0_weight[kAttentionTile];
      std::size_t key0_index[kAttentionTile];
    };
    std::vector<Job> tiles(static_cast<std::size_t>(jobs));
    for (int j = 0; j < jobs; ++j) {
      Job& job = tiles[j];
      job.kv = make_tile(j, job.tile, job.key0_index);
      job.tile.key0_weight = want_key0_weights ? job.key0_weight : nullptr;
      check_attention_args(job.tile, job.kv);
      for (int r = 0; r < job.tile.count; ++r) job.max_limit = std::max(job.max_limit, job.tile.limit[r]);
    }
    const std::size_t per_job = static_cast<std::size_t>(kAttentionTile) * keys_total;
    ws.split_scratch.ensure(per_job * jobs);
    constexpr int kKeyChunk = 256;  // a multiple of kKeyBlock
    const int key_chunks = (keys_total + kKeyChunk - 1) / kKeyChunk;
    tbb::parallel_for(0, jobs * key_chunks, [&](int item) {
      Job& job = tiles[item / key_chunks];
      const int k_begin = (item % key_chunks) * kKeyChunk;
      const int k_end = std::min(job.max_limit, k_begin + kKeyChunk);
      if (k_begin >= k_end) return;
      parts->scores(job.tile, job.kv, scale, ws.split_scratch.data() + per_job * (item / key_chunks), job.max_limit,
                    k_begin, k_end);
    });
    const int rows_per_job = tiles[0].tile.count;
    tbb::parallel_for(0, jobs * rows_per_job, [&](int item) {
      Job& job = tiles[item / rows_per_job];
      const int r = item % rows_per_job;
      if (r < job.tile.count) {
        parts->softmax_row(job.tile, r, ws.split_scratch.data() + per_job * (item / rows_per_job), job.max_limit);
      }
    });
    const int dim_chunks = (hd + parts->value_dims - 1) / parts->value_dims;
    tbb::parallel_for(0, jobs * dim_chunks, [&](int item) {
      Job& job = tiles[item / dim_chunks];
      const int c_begin = (item % dim_chunks) * parts->value_dims;
      parts->values(job.tile, job.kv, ws.split_scratch.data() + per_job * (item / dim_chunks), job.max_limit, c_begin,
                    std::min(hd, c_begin + parts->value_dims));
    });
    if (want_key0_weights) {
      for (const Job& job : tiles) {
        for (int r = 0; r < job.tile.count; ++r) ws.key0_weight[job.key0_index[r]] = job.key0_weight[r];
      }
    }
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int>(0, jobs), [&](const tbb::blocked_range<int>& range) {
    AlignedBuffer<float>& scratch = ws.scratch.local();
    scratch.ensure(static_cast<std::size_t>(kAttentionTile) * keys_total);
    for (int job = range.begin(); job < range.end(); ++job) {
      AttentionTile tile;
      float key0_weight[kAttentionTile];
      std::size_t key0_index[kAttentionTile];
      const KeyValueView kv = make_tile(job, tile, key0_index);
      tile.key0_weight = want_key0_weights ? key0_weight : nullptr;
      attention(attend_tile, tile, kv, scale, scratch.data());
      if (want_key0_weights) {
        for (int r = 0; r < tile.count; ++r) ws.key0_weight[key0_index[r]] = key0_weight[r];
      }
    }
  });
}

// SIW: key 0's post-softmax weight p0 of queries [first, T) scaled by their
// factor alpha without renormalising, outside the attention kernel:
// out += (alpha - 1) p0 v0.
void Model::correct_key0_weight(int layer, const Sequence& seq, int T, int first, Workspace& ws) const {
  const ModelConfig& c = config_;
  const int hd = static_cast<int>(c.head_dim), heads = static_cast<int>(c.heads);
  const int group = heads / static_cast<int>(c.kv_heads);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  add_key0_correction(ws.attn.data() + first * q_width, q_width, T - first, heads, group, hd,
                      ws.key0_weight.data() + first, static_cast<std::size_t>(T), ws.key0_factors.data() + first,
                      seq.layers_[layer].v.data(), static_cast<std::size_t>(seq.capacity_) * hd);
}

// Ms-PoE (Alg. 1 lines 5-10): this layer's per-head scales from the hook,
// fixed for the rest of the sequence.
void Model::apply_head_rope_scales(int layer, Sequence& seq, int T, const double* positions, Workspace& ws,
                                   const ForwardHooks& hooks) const {
  const ModelConfig& c = config_;
  const int heads = static_cast<int>(c.heads), kv_heads = static_cast<int>(c.kv_heads), group = heads / kv_heads;
  const std::size_t qkv_width = (static_cast<std::size_t>(heads) + 2 * kv_heads) * c.head_dim;
  ws.last_rows.ensure(static_cast<std::size_t>(heads) * T);
  last_query_rows_before_rope(ws.qkv.data(), qkv_width, T, heads, kv_heads, static_cast<int>(c.head_dim),
                              static_cast<std::size_t>(heads) * c.head_dim, ws.last_rows.data());
  const std::vector<float> scales =
      hooks.head_rope_scales(layer, std::span<const float>(ws.last_rows.data(), static_cast<std::size_t>(heads) * T), T);
  if (scales.empty()) return;
  if (scales.size() != static_cast<std::size_t>(heads)) {
    throw std::invalid_argument("forward: head_rope_scales must give one scale per head");
  }
  Sequence::LayerCache& lc = seq.layers_[layer];
  for (int h = 0; h < heads; ++h) {
    if (!std::isfinite(scales[h]) || scales[h] <= 0.0f) throw std::invalid_argument("forward: head scale must be > 0");
    if (lc.key_slots == kv_heads && scales[h] != scales[h / group * group]) {
      throw std::logic_error("forward: per-head scales in layer " + std::to_string(layer) +
                             " need a Sequence with per_head_key_slots there");
    }
  }
  for (int h = 0; h < heads; ++h) {
    seq.scales_.scale[static_cast<std::size_t>(layer) * heads + h] = scales[h];
    lc.slot_scale[lc.slot_of_head[h]] = scales[h];
    ws.rope_table(scales[h], positions, T, rope_inv_freq_);
  }
}

// PHS eq. 2 by linearity: scaling x_c by s adds (s - 1) x_c W[:, c] to every
// K row and to the Q rows from `first_query` on.
void Model::scale_qk_channel(const QkChannelScaling& phs, int T, int first_query, Workspace& ws) const {
  const ModelConfig& c = config_;
  const std::size_t hidden = c.hidden;
  const std::size_t q_width = static_cast<std::size_t>(c.heads) * c.head_dim;
  const std::size_t k_width = static_cast<std::size_t>(c.kv_heads) * c.head_dim;
  if (phs.q_column.size() != q_width || phs.k_column.size() != k_width || phs.channel < 0 ||
      static_cast<std::size_t>(phs.channel) >= hidden) {
    throw std::invalid_argument("forward: qk_channel_scaling does not fit the model");
  }
  const std::size_t qkv_width = q_width + 2 * k_width;
  add_channel_column(ws.qkv.data(), qkv_width, T, q_width, static_cast<int>(k_width), ws.xn.data(), hidden,
                     phs.channel, phs.scale, phs.k_column.data());
  add_channel_column(ws.qkv.data() + first_query * qkv_width, qkv_width, T - first_query, 0,
                     static_cast<int>(q_width), ws.xn.data() + first_query * hidden, hidden, phs.channel, phs.scale,
                     phs.q_column.data());
}

// PHS eq. 3: keys re-cached from the changed K rows, the last queries' rows
// [first, T) recomputed with their changed Q rows (other rows keep the plain
// attention).
void Model::recompute_last_rows(int layer, Sequence& seq, int T, int first, Workspace& ws) const {
  cache_keys(layer, seq, T, ws);
  rotate_queries(layer, seq, T, first, ws);
  attend(layer, seq, T, first, !ws.key0_factors.empty(), false, ws);
  if (!ws.key0_factors.empty()) correct_key0_weight(layer, seq, T, first, ws);
}

}  // namespace midtune::engine
