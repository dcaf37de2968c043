#include "backends/engine/model.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include <tbb/parallel_for.h>

#include "backends/engine/devices/cpu/cpu_device.hpp"
#include "backends/engine/engine_hooks.hpp"
#include "backends/engine/gguf/content_hash.hpp"
#include "backends/engine/model_loading.hpp"
#include "backends/engine/ops/gated_activation.hpp"
#include "backends/engine/ops/last_query_rows.hpp"
#include "backends/engine/ops/merge_attention.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/rope.hpp"
#include "backends/engine/ops/row_updates.hpp"
#include "backends/engine/ops/scoring.hpp"

namespace midtune::engine {

// ---------------------------------------------------------------- scales

SequenceScales SequenceScales::ones(int layers, int heads) {
  SequenceScales s;
  s.layers = layers;
  s.heads = heads;
  s.scale.assign(static_cast<std::size_t>(layers) * heads, 1.0f);
  return s;
}

bool SequenceScales::all_ones() const {
  return std::all_of(scale.begin(), scale.end(), [](float v) { return v == 1.0f; });
}

void SequenceScales::check(const ModelConfig& c, const char* who) const {
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
  if (!score_factor.empty() && score_factor.size() != c.layers) {
    throw std::invalid_argument(w + ": score_factor has " + std::to_string(score_factor.size()) +
                                " entries, the model has " + std::to_string(c.layers) + " layers");
  }
  for (float f : score_factor) {
    if (!std::isfinite(f) || f <= 0.0f) {
      throw std::invalid_argument(w + ": attention score factor " + std::to_string(f) + " must be finite and > 0");
    }
  }
  if (!per_head_key_slots.empty() && per_head_key_slots.size() != c.layers) {
    throw std::invalid_argument(w + ": per_head_key_slots has " + std::to_string(per_head_key_slots.size()) +
                                " entries, the model has " + std::to_string(c.layers) + " layers");
  }
  if (distance_remap.near_window < 0 || distance_remap.group < 1 || !std::isfinite(distance_remap.query_shift)) {
    throw std::invalid_argument(w + ": distance remap needs near_window >= 0, group >= 1 and a finite query shift");
  }
  if (!remapped_layers.empty() && remapped_layers.size() != c.layers) {
    throw std::invalid_argument(w + ": remapped_layers has " + std::to_string(remapped_layers.size()) +
                                " entries, the model has " + std::to_string(c.layers) + " layers");
  }
  if (distance_remap.on() && !c.has_rope()) {
    throw std::invalid_argument(w + ": a distance remap moves RoPE positions; this model has no RoPE");
  }
}

int SequenceScales::key_slots(int layer, int kv_heads) const {
  const int group = heads / kv_heads;
  bool uniform_groups = per_head_key_slots.empty() || per_head_key_slots[static_cast<std::size_t>(layer)] == 0;
  for (int h = 0; h < heads; ++h) uniform_groups = uniform_groups && at(layer, h) == at(layer, h / group * group);
  return uniform_groups ? kv_heads : heads;
}

// ---------------------------------------------------------------- loading

namespace {

MatrixPart matrix_part(const GgufFile& file, const std::string& name, std::uint64_t cols, std::uint64_t rows) {
  const GgufTensorInfo& info = matrix_tensor(file, name, cols, rows);
  return MatrixPart{info.type->type, file.tensor_data(info).data(), static_cast<int>(rows)};
}

}  // namespace

Model::Model(const std::filesystem::path& path, Device& device)
    : device_(device), file_(std::make_unique<GgufFile>(path)), config_(read_model_config(*file_)) {
  load();
}

Model::Model(const std::filesystem::path& path, Isa isa, bool fp32_weights, KvForm kv_form)
    : owned_device_(std::make_unique<CpuDevice>(isa, fp32_weights, kv_form)), device_(*owned_device_),
      file_(std::make_unique<GgufFile>(path)), config_(read_model_config(*file_)) {
  load();
}

void Model::load() {
  const GgufFile& f = *file_;
  const ModelConfig& c = config_;
  check_model_shape(f, c, device_.max_head_dim());
  const std::uint64_t q_rows = std::uint64_t{c.heads} * c.head_dim;
  const std::uint64_t kv_rows = std::uint64_t{c.kv_heads} * c.head_dim;
  std::atomic<std::size_t> bytes{0};
  auto upload_vector = [&](const auto& host) {
    using T = typename std::decay_t<decltype(host)>::value_type;
    DeviceBuffer<T> buffer(device_, host.size());
    device_.upload(buffer.data(), host.data(), host.size() * sizeof(T));
    bytes += host.size() * sizeof(T);
    return buffer;
  };
  auto load_matrix = [&](const std::vector<MatrixPart>& parts, std::uint64_t cols, const std::string& what) {
    try {
      std::unique_ptr<DeviceMatrix> matrix = device_.load_matrix(parts, static_cast<int>(cols));
      bytes += matrix->bytes();
      return matrix;
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(f.path().string() + ": " + what + ": " + e.what());
    }
  };

  const GgufTensorInfo& embd = matrix_tensor(f, "token_embd.weight", c.hidden, c.vocab);
  embedding_ = device_.load_embedding(MatrixPart{embd.type->type, f.tensor_data(embd).data(), static_cast<int>(c.vocab)},
                                      static_cast<int>(c.hidden), embd.n_bytes / c.vocab);
  bytes += embedding_->bytes();
  output_norm_ = upload_vector(vector_tensor(f, "output_norm.weight", c.hidden));
  if (c.layer_norm) output_norm_bias_ = upload_vector(optional_vector_tensor(f, "output_norm.bias", c.hidden));
  const std::string head_name = c.tied_output ? "token_embd.weight" : "output.weight";
  lm_head_ = load_matrix({matrix_part(f, head_name, c.hidden, c.vocab)}, c.hidden, head_name);
  if (c.has_rope()) rope_inv_freq_ = upload_vector(rope_inverse_frequencies(f, c));
  if (c.has_rope() && !c.local_layers.empty()) rope_inv_freq_local_ = upload_vector(rope_inverse_frequencies(f, c, true));

  layers_.resize(c.layers);
  auto load_layer = [&](int l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& w = layers_[l];
    w.attn_norm = upload_vector(vector_tensor(f, p + "attn_norm.weight", c.hidden));
    w.ffn_norm = upload_vector(vector_tensor(f, p + "ffn_norm.weight", c.hidden));
    if (c.layer_norm) {
      w.attn_norm_bias = upload_vector(optional_vector_tensor(f, p + "attn_norm.bias", c.hidden));
      w.ffn_norm_bias = upload_vector(optional_vector_tensor(f, p + "ffn_norm.bias", c.hidden));
      w.attn_out_bias = upload_vector(optional_vector_tensor(f, p + "attn_output.bias", c.hidden));
      w.up_bias = upload_vector(optional_vector_tensor(f, p + "ffn_up.bias", c.ffn));
      w.down_bias = upload_vector(optional_vector_tensor(f, p + "ffn_down.bias", c.hidden));
    }
    // Q|K|V fused in one tensor (phi3, mpt; and its bias, mpt), rows in that order.
    const bool fused = f.find_tensor(p + "attn_qkv.weight") != nullptr;
    w.qkv_bias = upload_vector(fused ? optional_vector_tensor(f, p + "attn_qkv.bias", q_rows + 2 * kv_rows)
                                     : qkv_bias(f, p, q_rows, kv_rows));
    if (c.qk_norm) {
      w.q_norm = upload_vector(vector_tensor(f, p + "attn_q_norm.weight", c.head_dim));
      w.k_norm = upload_vector(vector_tensor(f, p + "attn_k_norm.weight", c.head_dim));
    }
    if (c.post_norms) {
      w.attn_post_norm = upload_vector(vector_tensor(f, p + "post_attention_norm.weight", c.hidden));
      w.ffn_post_norm = upload_vector(vector_tensor(f, p + "post_ffw_norm.weight", c.hidden));
    }
    if (fused) {
      for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) {
        if (f.find_tensor(p + part) != nullptr) {
          throw std::invalid_argument(tensor_where(f, p + part) + ": beside " + p +
                                      "attn_qkv.weight (one of the two would be ignored)");
        }
      }
      w.qkv = load_matrix({matrix_part(f, p + "attn_qkv.weight", c.hidden, q_rows + 2 * kv_rows)}, c.hidden,
                          p + "attn_qkv");
    } else {
      w.qkv = load_matrix({matrix_part(f, p + "attn_q.weight", c.hidden, q_rows),
                           matrix_part(f, p + "attn_k.weight", c.hidden, kv_rows),
                           matrix_part(f, p + "attn_v.weight", c.hidden, kv_rows)},
                          c.hidden, p + "attn_q/k/v");
    }
    w.attn_out = load_matrix({matrix_part(f, p + "attn_output.weight", q_rows, c.hidden)}, q_rows, p + "attn_output");
    // gate|up rows: phi3's ffn_up holds both, the gate's first; an ungated
    // FFN (mpt) has the up rows only.
    if (c.fused_gate_up) {
      w.gate_up = load_matrix({matrix_part(f, p + "ffn_up.weight", c.hidden, 2 * std::uint64_t{c.ffn})}, c.hidden,
                              p + "ffn_up (gate|up)");
    } else if (c.gated_ffn) {
      w.gate_up = load_matrix({matrix_part(f, p + "ffn_gate.weight", c.hidden, c.ffn),
                               matrix_part(f, p + "ffn_up.weight", c.hidden, c.ffn)},
                              c.hidden, p + "ffn_gate/up");
    } else {
      w.gate_up = load_matrix({matrix_part(f, p + "ffn_up.weight", c.hidden, c.ffn)}, c.hidden, p + "ffn_up");
    }
    w.down = load_matrix({matrix_part(f, p + "ffn_down.weight", c.ffn, c.hidden)}, c.ffn, p + "ffn_down");
  };
  if (device_.loads_in_parallel()) {
    tbb::parallel_for(0, static_cast<int>(c.layers), load_layer);
  } else {
    for (int l = 0; l < static_cast<int>(c.layers); ++l) load_layer(l);
  }
  weight_bytes_ = bytes;
  ws_ = std::make_unique<Workspace>();
  device_.synchronize();
  // Hashed from the very bytes the weights came from; then those bytes are
  // freed but for what the hooks read again, so the file costs no memory
  // beside the device's own copy of the weights.
  content_hash_ = gguf_content_hash(*file_);
  file_->release_tensor_data([](const GgufTensorInfo& tensor) { return hooks::read_after_load(tensor.name); });
}

// Every op of a forward pass goes through run_op, so that a profile times
// any op by op without a wrapper that restates the Device interface: a
// Device op (DEVICE_OP) or an op over rows (ROW_OP: ops::<op> on the
// device's op_target). A product's row also names its matrix's shape (the
// projections and the vocabulary product differ by far).
template <typename Op, typename... Args>
void Model::run_op(const char* name, Op op, Args&&... args) const {
  if (profile_ == nullptr) {
    op(std::forward<Args>(args)...);
    return;
  }
  std::string key = name;
  if constexpr (sizeof...(Args) > 0) {
    const auto& first = std::get<0>(std::forward_as_tuple(args...));
    if constexpr (std::is_base_of_v<DeviceMatrix, std::decay_t<decltype(first)>>) {
      key.append(" ").append(std::to_string(first.rows())).append("x").append(std::to_string(first.cols()));
    }
  }
  device_.synchronize();
  const auto start = std::chrono::steady_clock::now();
  op(std::forward<Args>(args)...);
  device_.synchronize();
  profile_->add(key, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}
#define DEVICE_OP(op, ...) \
  run_op(#op, [this](auto&&... a) { device_.op(std::forward<decltype(a)>(a)...); }, __VA_ARGS__)
#define ROW_OP(op, ...) \
  run_op(#op, [this](auto&&... a) { ops::op(device_.op_target(), std::forward<decltype(a)>(a)...); }, __VA_ARGS__)

Model::~Model() = default;

// ---------------------------------------------------------------- sequence

std::size_t Sequence::cache_bytes(const ModelConfig& c, const Device& device, int capacity) {
  return 2 * device.kv_value_bytes() * std::size_t{c.layers} * c.kv_heads * c.head_dim *
         static_cast<std::size_t>(capacity);
}

Sequence::Sequence(const Model& model, int capacity, SequenceScales scales)
    : model_(&model), capacity_(capacity), scales_(std::move(scales)) {
  const ModelConfig& c = model.config();
  const int kv_heads = static_cast<int>(c.kv_heads);
  if (capacity <= 0) throw std::invalid_argument("Sequence: capacity must be positive");
  scales_.check(c, "Sequence");
  layers_.resize(c.layers);
  far_layers_.resize(c.layers);
  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    const int slots = scales_.key_slots(l, kv_heads);
    layers_[l] = model.device().make_layer_kv(capacity, slots, kv_heads, static_cast<int>(c.head_dim));
    if (scales_.remaps(l) && scales_.distance_remap.moves_keys()) {
      far_layers_[l] = model.device().make_layer_kv(capacity, slots, kv_heads, static_cast<int>(c.head_dim));
    }
  }
  positions_.reserve(static_cast<std::size_t>(capacity));
}

void Sequence::truncate(int length) {
  if (length < 0 || length > length_) {
    throw std::invalid_argument("Sequence::truncate: " + std::to_string(length) + " outside [0, " +
                                std::to_string(length_) + "]");
  }
  length_ = length;
  positions_.resize(static_cast<std::size_t>(length));
}

// ---------------------------------------------------------------- workspace

struct Model::Workspace {
  DeviceBuffer<std::int32_t> tokens;
  DeviceBuffer<double> positions;
  DeviceBuffer<float> x, xn, qkv, q_rot, attn, proj, ffn, act, logits;
  DeviceBuffer<float> tables, scales, rows, last_row, key0_weight, factors, columns;
  // A remapped attention's far half: each row's far query and key positions
  // (the packed rows' query positions, then their key positions), their
  // tables, the far-rotated queries, the far attention's output rows and
  // both halves' log-sum-exps.
  DeviceBuffer<double> far_positions;
  DeviceBuffer<float> far_tables, q_far, attn_far, log_sum_exp;
  int far_key_positions_at = 0;  // where the key positions start (0: no sequence remaps in this call)
  DeviceBuffer<std::int32_t> gold, argmax;
  DeviceBuffer<double> gold_logprob;
  std::vector<float> host_factors;  // this layer's SIW factors of the sequence in hand (empty = none)
  std::vector<float> host_rows;     // rows a hook reads
  // The RoPE tables of this forward call, per sequence (by its first row
  // in the packed matrix) and scale, computed once and read by every layer
  // and head that rotates with that scale: most methods keep one scale, or
  // a few, across the layers. Entries past `rope_tables_used` are spare
  // buffers kept for the next call.
  struct RopeTable {
    int offset = 0;
    float scale = 0.0f;
    const double* inv_freq = nullptr;  // the layers' frequencies it was made with
    DeviceBuffer<float> cos_sin;
  };
  std::vector<RopeTable> rope_tables;
  std::size_t rope_tables_used = 0;
  std::size_t rope_table_bytes = 0;
};

std::size_t Model::activation_bytes_per_token() const {
  const ModelConfig& c = config_;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * std::size_t{c.kv_heads} * c.head_dim;
  const std::size_t widest = std::max<std::size_t>({c.hidden, q_width, c.ffn});
  // x, xn, proj; qkv; q_rot, attn; gate|up, act; the device's own bf16 copy
  // of a product's input; the token id and position.
  return sizeof(float) * (2 * c.hidden + std::max<std::size_t>(c.hidden, q_width) + qkv_width + 2 * q_width + 3 * c.ffn) +
         sizeof(std::uint16_t) * widest + sizeof(std::int32_t) + sizeof(double);
}

// ---------------------------------------------------------------- forward

std::vector<float> Model::forward(Sequence& seq, std::span<const std::int32_t> tokens,
                                  std::span<const double> positions, std::span<const int> logit_rows,
                                  const ForwardHooks* hooks) {
  const int n = static_cast<int>(tokens.size());
  for (int r : logit_rows) {
    if (r < 0 || r >= n) throw std::invalid_argument("forward: logit row " + std::to_string(r) + " out of range");
  }
  if (!positions.empty() && static_cast<int>(positions.size()) != n) {
    throw std::invalid_argument("forward: " + std::to_string(positions.size()) + " positions for " +
                                std::to_string(n) + " tokens");
  }
  std::vector<double> pos(positions.begin(), positions.end());
  if (pos.empty()) {
    pos.resize(n);
    for (int i = 0; i < n; ++i) pos[i] = seq.last_position() + 1.0 + i;
  }
  std::vector<float> logits(logit_rows.size() * static_cast<std::size_t>(vocab()));
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
    const SequenceCall call{&seq, tokens.subspan(c0, c1 - c0), std::span<const double>(pos).subspan(c0, c1 - c0),
                            local_rows, hooks};
    forward(std::span<const SequenceCall>(&call, 1));
    if (local_rows.empty()) continue;
    const std::vector<float> chunk_logits = download_logits();
    for (std::size_t i = 0; i < local_rows.size(); ++i) {
      std::copy_n(chunk_logits.data() + i * vocab(), vocab(), logits.data() + out_index[i] * vocab());
    }
  }
  return logits;
}

void Model::forward(std::span<const SequenceCall> calls) {
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
    Sequence* seq = call.sequence;
    const int T = static_cast<int>(call.tokens.size());
    if (seq == nullptr) throw std::invalid_argument("forward: a call without a sequence");
    if (seq->model_ != this) throw std::invalid_argument("forward: sequence of another model");
    if (seq->length_ + T > seq->capacity_) {
      throw std::invalid_argument("forward: " + std::to_string(seq->length_) + " cached + " + std::to_string(T) +
                                  " new tokens exceed the sequence capacity " + std::to_string(seq->capacity_));
    }
    if (!call.positions.empty() && call.positions.size() != call.tokens.size()) {
      throw std::invalid_argument("forward: positions must be empty or one per token");
    }
    if (call.hooks != nullptr && !call.hooks->last_query_row_layers.empty() &&
        call.hooks->last_query_row_layers.size() != c.layers) {
      throw std::invalid_argument("forward: last_query_row_layers needs one entry per layer");
    }
    for (const SequenceCall& other : calls) {
      if (&other != &call && other.sequence == seq) throw std::invalid_argument("forward: a sequence twice in one call");
    }
    offsets.push_back(static_cast<int>(tokens.size()));
    for (int row : call.logit_rows) {
      if (row < 0 || row >= T) throw std::invalid_argument("forward: logit row " + std::to_string(row) + " outside the call's tokens");
      logit_rows.push_back(offsets.back() + row);
    }
    double next = seq->last_position() + 1.0;
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

  ws.rope_tables_used = 0;
  ws.rope_table_bytes = 0;
  ws.tokens.ensure(device_, N);
  ws.positions.ensure(device_, N);
  DEVICE_OP(upload, ws.tokens.data(), tokens.data(), tokens.size() * sizeof(std::int32_t));
  DEVICE_OP(upload, ws.positions.data(), positions.data(), positions.size() * sizeof(double));
  upload_far_positions(calls, offsets, positions);
  // Every sequence's RoPE scales in one upload (a row is uploaded again only
  // where an Ms-PoE prefill sets it): no transfer per layer and sequence.
  const std::size_t scales_per_call = std::size_t{c.layers} * c.heads;
  std::vector<float> all_scales;
  all_scales.reserve(calls.size() * scales_per_call);
  for (const SequenceCall& call : calls) {
    all_scales.insert(all_scales.end(), call.sequence->scales_.scale.begin(), call.sequence->scales_.scale.end());
  }
  ws.scales.ensure(device_, all_scales.size());
  DEVICE_OP(upload, ws.scales.data(), all_scales.data(), all_scales.size() * sizeof(float));
  const std::size_t rows = static_cast<std::size_t>(std::max(N, R));
  ws.x.ensure(device_, rows * hidden);
  ws.xn.ensure(device_, rows * std::max(hidden, q_width));
  ws.qkv.ensure(device_, N * qkv_width);
  ws.q_rot.ensure(device_, N * q_width);
  ws.attn.ensure(device_, N * q_width);
  if (ws.far_key_positions_at > 0) {
    ws.q_far.ensure(device_, N * q_width);
    ws.attn_far.ensure(device_, N * q_width);
  }
  ws.proj.ensure(device_, rows * hidden);
  ws.ffn.ensure(device_, N * 2 * ffn);
  ws.act.ensure(device_, N * ffn);

  DEVICE_OP(embed, *embedding_, ws.tokens.data(), N, c.embedding_scale, ws.x.data());
  // The layer's batched attention step; per layer only the sequences, the
  // window and the frequencies change.
  DecodeBatch decode;
  decode.qkv = ws.qkv.data();
  decode.qkv_ld = qkv_width;
  decode.positions = ws.positions.data();
  decode.rope_dims = c.has_rope() ? static_cast<int>(c.rope_dims) : 0;
  decode.pairing = c.rope_pairing;
  decode.heads = static_cast<int>(c.heads);
  decode.kv_heads = static_cast<int>(c.kv_heads);
  decode.head_dim = static_cast<int>(c.head_dim);
  decode.scale = c.attention_scale;
  decode.shaping = ScoreShaping{c.attn_softcap, c.max_alibi_bias};
  decode.q_rot = ws.q_rot.data();
  decode.q_rot_ld = q_width;
  decode.out = ws.attn.data();
  decode.out_ld = q_width;
  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    const Layer& w = layers_[l];
    // Attention block.
    norm_rows(ws.x.data(), w.attn_norm, w.attn_norm_bias, N, ws.xn.data());
    project_qkv(l, ws.xn.data(), N, ws.qkv.data());
    // The clamp (mpt) and the per-head Q/K norm (qwen3, gemma3) before RoPE
    // and before any hook reads Q and K, as llama.cpp orders them.
    finish_qkv(l, ws.qkv.data(), N);
    decode.sequences.clear();
    decode.window = static_cast<int>(c.layer_window(l));
    decode.inverse_frequencies = c.is_local(l) ? rope_inv_freq_local_.data() : rope_inv_freq_.data();
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const std::size_t scales_at = i * scales_per_call + std::size_t{c.heads} * l;
      const ForwardHooks* hooks = calls[i].hooks;
      const QkChannelScaling* channel_scaling =
          hooks != nullptr && hooks->qk_channel_scaling ? hooks->qk_channel_scaling(l) : nullptr;
      if (!joins_decode_batch(l, calls[i], channel_scaling)) {
        attend_sequence(l, calls[i], offsets[i], ws.scales.data() + scales_at, channel_scaling);
        continue;
      }
      Sequence& seq = *calls[i].sequence;
      decode.sequences.push_back({seq.layers_[l].get(), offsets[i], static_cast<int>(calls[i].tokens.size()),
                                  seq.length_, ws.scales.data() + scales_at,
                                  seq.scales_.scale.data() + std::size_t{c.heads} * l});
    }
    if (!decode.sequences.empty()) DEVICE_OP(decode_attention, decode);
    DEVICE_OP(matmul, *w.attn_out, ws.attn.data(), q_width, N, ws.proj.data(), hidden);
    add_bias(ws.proj.data(), N, w.attn_out_bias);
    add_block_output(w.attn_post_norm, ws.proj.data(), N);
    feed_forward(l, N);
    add_block_output(w.ffn_post_norm, ws.proj.data(), N);
    // Stage: layer output, for the hooks that tap the residual stream.
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const ForwardHooks* hooks = calls[i].hooks;
      if (hooks == nullptr || !hooks->on_layer_output) continue;
      const std::size_t count = calls[i].tokens.size() * hidden;
      ws.host_rows.resize(count);
      DEVICE_OP(download, ws.host_rows.data(), ws.x.data() + static_cast<std::size_t>(offsets[i]) * hidden,
                count * sizeof(float));
      hooks->on_layer_output(l, calls[i].sequence->length_, ws.host_rows, static_cast<int>(calls[i].tokens.size()));
    }
  }
  for (std::size_t i = 0; i < calls.size(); ++i) {
    Sequence& seq = *calls[i].sequence;
    seq.length_ += static_cast<int>(calls[i].tokens.size());
    seq.positions_.insert(seq.positions_.end(), positions.begin() + offsets[i],
                          positions.begin() + offsets[i] + static_cast<std::ptrdiff_t>(calls[i].tokens.size()));
  }

  if (R == 0) return;
  // The rows asked for, gathered, normed and projected to the vocabulary.
  for (int r = 0; r < R; ++r) {
    DEVICE_OP(copy_rows, ws.proj.data() + static_cast<std::size_t>(r) * hidden, sizeof(float) * hidden,
              ws.x.data() + static_cast<std::size_t>(logit_rows[r]) * hidden, sizeof(float) * hidden,
              sizeof(float) * hidden, 1);
  }
  norm_rows(ws.proj.data(), output_norm_, output_norm_bias_, R, ws.xn.data());
  ws.logits.ensure(device_, static_cast<std::size_t>(R) * c.vocab);
  DEVICE_OP(matmul, *lm_head_, ws.xn.data(), hidden, R, ws.logits.data(), c.vocab);
  // gemma2's final soft-cap (gemma3's where the file sets one).
  if (c.final_softcap != 0.0f) {
    ROW_OP(cap_values, ws.logits.data(), static_cast<std::size_t>(R) * c.vocab, c.final_softcap, true);
  }
}

void Model::norm_rows(const float* x, const DeviceBuffer<float>& weight, const DeviceBuffer<float>& bias, int rows,
                      float* y) {
  const ModelConfig& c = config_;
  const int hidden = static_cast<int>(c.hidden);
  if (c.layer_norm) {
    ROW_OP(layer_norm_rows, x, hidden, weight.data(), bias.size() > 0 ? bias.data() : nullptr, rows, hidden, c.rms_eps,
           y, hidden);
  } else {
    ROW_OP(rms_norm_rows, x, hidden, weight.data(), rows, hidden, c.rms_eps, y, hidden);
  }
}

// The feed-forward block of layer `layer` on the call's N rows, into
// ws.proj: gated, SwiGLU or GeGLU (gemma, gemma2, gemma3); or ungated (mpt),
// the activation of the up projection (+ bias) alone, and the down
// projection's bias.
void Model::feed_forward(int layer, int N) {
  const ModelConfig& c = config_;
  const Layer& w = layers_[layer];
  Workspace& ws = *ws_;
  const std::size_t hidden = c.hidden, ffn = c.ffn;
  norm_rows(ws.x.data(), w.ffn_norm, w.ffn_norm_bias, N, ws.xn.data());
  if (c.gated_ffn) {
    DEVICE_OP(matmul, *w.gate_up, ws.xn.data(), hidden, N, ws.ffn.data(), 2 * ffn);
    ROW_OP(gated_activation, c.ffn_activation, ws.ffn.data(), ws.ffn.data() + ffn, 2 * ffn, N, static_cast<int>(ffn),
           ws.act.data(), ffn);
  } else {
    DEVICE_OP(matmul, *w.gate_up, ws.xn.data(), hidden, N, ws.ffn.data(), ffn);
    add_bias(ws.ffn.data(), N, w.up_bias);
    ROW_OP(gated_activation, c.ffn_activation, ws.ffn.data(), nullptr, ffn, N, static_cast<int>(ffn), ws.act.data(),
           ffn);
  }
  DEVICE_OP(matmul, *w.down, ws.act.data(), ffn, N, ws.proj.data(), hidden);
  add_bias(ws.proj.data(), N, w.down_bias);
}

// A bias added to every one of `rows` rows (rows as wide as the bias, one
// after the other); an empty bias adds nothing.
void Model::add_bias(float* x, int rows, const DeviceBuffer<float>& bias) {
  if (bias.size() == 0) return;
  ROW_OP(add_row_vector, x, bias.size(), rows, bias.data(), static_cast<int>(bias.size()));
}

// The residual add of a block's output, normed first where the architecture
// norms it (gemma3's post-attention and post-FFN norms).
void Model::add_block_output(const DeviceBuffer<float>& post_norm, const float* out, int N) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const std::size_t hidden = c.hidden;
  if (post_norm.size() > 0) {
    ROW_OP(rms_norm_rows, out, hidden, post_norm.data(), N, static_cast<int>(hidden), c.rms_eps, ws.xn.data(), hidden);
    out = ws.xn.data();
  }
  ROW_OP(add, ws.x.data(), out, N * hidden);
}

// Whether the sequence's attention in `layer` joins the layer's batched
// step: a short call on which no hook acts between the ops in this layer
// (Ms-PoE's scales are set in a prefill; the readouts, SIW's key-0 factors
// and PHS's channel scaling read or change rows in the middle).
bool Model::joins_decode_batch(int layer, const SequenceCall& call, const QkChannelScaling* channel_scaling) const {
  const int T = static_cast<int>(call.tokens.size());
  if (T == 0 || T > decode_batch_tokens) return false;
  // A temperature's scale differs from the batch's one attention scale; a
  // remapped attention is two attentions and a merge.
  if (call.sequence->scales_.score_factor_at(layer) != 1.0f || call.sequence->scales_.remaps(layer)) return false;
  const ForwardHooks* hooks = call.hooks;
  if (hooks == nullptr) return true;
  return !sets_head_scales(layer, call) && !reads_last_row(layer, hooks) && !hooks->key0_weight_factors &&
         channel_scaling == nullptr;
}

// Ms-PoE sets this layer's per-head scales in this call (its prefill).
bool Model::sets_head_scales(int layer, const SequenceCall& call) {
  const ForwardHooks* hooks = call.hooks;
  return hooks != nullptr && hooks->head_rope_scales && call.sequence->length_ == 0 &&
         (hooks->head_rope_scale_layers.empty() || hooks->head_rope_scale_layers[layer] != 0);
}

// A hook reads this layer's last-query row (Ms-PoE's awareness, SIW).
bool Model::reads_last_row(int layer, const ForwardHooks* hooks) {
  return hooks != nullptr && hooks->last_query_row && !hooks->last_query_row_layers.empty() &&
         hooks->last_query_row_layers[layer] != 0;
}

// Attention of one sequence's rows [offset, offset + T) in layer `layer`,
// with its hooks in the order the methods need them.
void Model::attend_sequence(int layer, const SequenceCall& call, int offset, float* device_scales,
                            const QkChannelScaling* channel_scaling) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  Sequence& seq = *call.sequence;
  const ForwardHooks* hooks = call.hooks;
  const int T = static_cast<int>(call.tokens.size());
  if (T == 0) return;
  const int heads = static_cast<int>(c.heads), kv_heads = static_cast<int>(c.kv_heads);
  const int hd = static_cast<int>(c.head_dim), pairs = static_cast<int>(c.rope_dims / 2);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const std::size_t kv_width = static_cast<std::size_t>(kv_heads) * hd;
  const std::size_t qkv_width = q_width + 2 * kv_width;
  const int start = seq.length_;
  float* qkv = ws.qkv.data() + static_cast<std::size_t>(offset) * qkv_width;
  const LayerKv& kv = *seq.layers_[layer];

  if (sets_head_scales(layer, call)) {
    apply_head_rope_scales(layer, seq, qkv, T, device_scales, *hooks);
  }
  // A channel scaling acts on every row of a call after the prefill (each
  // is a decode step's last token): scaled before the one attention. In the
  // prefill it acts on the last row only, after the plain attention of the
  // others (below), whose readouts the hooks above take.
  const float* normed = ws.xn.data() + static_cast<std::size_t>(offset) * c.hidden;
  const bool scales_after_attention = channel_scaling != nullptr && start == 0;
  if (channel_scaling != nullptr && !scales_after_attention) {
    scale_qk_channel(layer, *channel_scaling, qkv, normed, T, 0);
  }

  // RoPE tables for this sequence's positions: one when every head of the
  // layer shares a scale, else one per query head (key slot s of a GQA layer
  // reads its group's first head's table), gathered from the call's tables
  // per scale where they fit the cache, else computed for this layer.
  const float* layer_scales = seq.scales_.scale.data() + static_cast<std::size_t>(layer) * heads;
  const bool one_table = std::all_of(layer_scales, layer_scales + heads, [&](float s) { return s == layer_scales[0]; });
  const std::size_t table_size = static_cast<std::size_t>(T) * pairs * 2;
  // Local layers (gemma2, gemma3) turn at their own base. Without RoPE
  // (mpt, ALiBi in the attention) there are no tables: keys and queries stay
  // as they are.
  const double* inv_freq = c.is_local(layer) ? rope_inv_freq_local_.data() : rope_inv_freq_.data();
  const float* tables = one_table && c.has_rope() ? rope_table(offset, T, layer_scales[0], device_scales, inv_freq)
                                                  : nullptr;
  if (tables == nullptr && c.has_rope()) {
    const int count = one_table ? 1 : heads;
    ws.tables.ensure(device_, count * table_size);
    bool gathered = !one_table;
    for (int h = 0; gathered && h < heads; ++h) {
      const float* table = rope_table(offset, T, layer_scales[h], device_scales + h, inv_freq);
      if (table == nullptr) gathered = false;
      if (gathered) {
        DEVICE_OP(copy_rows, ws.tables.data() + h * table_size, 0, table, 0, table_size * sizeof(float), 1);
      }
    }
    if (!gathered) {
      ROW_OP(rope_tables, ws.positions.data() + offset, T, device_scales, count, inv_freq, pairs, ws.tables.data());
    }
    tables = ws.tables.data();
  }
  const std::size_t query_stride = one_table ? 0 : table_size;
  const std::size_t key_stride = one_table ? 0 : kv.slot_table_stride(heads, table_size);

  // Cache values and rotated keys; rotate the queries.
  DEVICE_OP(cache_values, *seq.layers_[layer], start, qkv + q_width + kv_width, qkv_width, T);
  cache_keys(layer, seq, qkv, T, tables, key_stride);
  rotate_queries(ws.q_rot.data(), offset, T, 0, qkv, tables, query_stride);
  const bool remapped = seq.scales_.remaps(layer);
  if (remapped) prepare_far_half(layer, seq, offset, T, 0, qkv, device_scales, one_table ? 1 : heads, inv_freq);

  // Attention, the last query's row read out, then key 0's weight corrected
  // outside the kernel (SIW reads the row to find its factors).
  const int keys_total = start + T;
  const bool readout = reads_last_row(layer, hooks);
  const bool key0 = hooks != nullptr && static_cast<bool>(hooks->key0_weight_factors);
  attend(layer, seq, offset, T, 0, key0, readout);
  if (readout) {
    ws.host_rows.resize(static_cast<std::size_t>(heads) * keys_total);
    DEVICE_OP(download, ws.host_rows.data(), ws.last_row.data(), ws.host_rows.size() * sizeof(float));
    hooks->last_query_row(layer, ws.host_rows, keys_total, start, T);
  }
  ws.host_factors.clear();
  if (key0) ws.host_factors = hooks->key0_weight_factors(layer, start, T);
  if (!ws.host_factors.empty()) {
    if (ws.host_factors.size() != static_cast<std::size_t>(T)) {
      throw std::invalid_argument("forward: key0_weight_factors must give one factor per token");
    }
    ws.factors.ensure(device_, T);
    DEVICE_OP(upload, ws.factors.data(), ws.host_factors.data(), sizeof(float) * T);
    correct_key0(layer, seq, offset, T, 0);
  }

  // The channel scaling of the prefill (PHS eq. 2-3): the K rows and the
  // last query's Q row scaled; keys re-cached from the changed K rows and
  // the last row attended again with its changed Q row, as every other row
  // of the prompt keeps the plain attention above.
  if (!scales_after_attention) return;
  const int last = T - 1;
  scale_qk_channel(layer, *channel_scaling, qkv, normed, T, last);
  cache_keys(layer, seq, qkv, T, tables, key_stride);
  rotate_queries(ws.q_rot.data(), offset, T, last, qkv, tables, query_stride);
  if (remapped) prepare_far_half(layer, seq, offset, T, last, qkv, device_scales, one_table ? 1 : heads, inv_freq);
  attend(layer, seq, offset, T, last, !ws.host_factors.empty(), false);
  if (!ws.host_factors.empty()) correct_key0(layer, seq, offset, T, last);
}

// The RoPE table of `scale` (device_scale: that scale on the device) and the
// frequencies `inv_freq` for the call whose rows start at `offset`, computed
// on first use in this forward
// call; null where it would not fit the cache (the caller computes its own).
const float* Model::rope_table(int offset, int T, float scale, const float* device_scale, const double* inv_freq) {
  // Enough for every layer's own scale (LPES) over a whole long prompt on
  // the CPU engine; a GPU's packed batch may exceed it and computes the
  // tables per layer instead (cheap there).
  constexpr std::size_t kRopeTableCacheBytes = std::size_t{64} << 20;
  Workspace& ws = *ws_;
  for (std::size_t i = 0; i < ws.rope_tables_used; ++i) {
    const Workspace::RopeTable& table = ws.rope_tables[i];
    if (table.offset == offset && table.scale == scale && table.inv_freq == inv_freq) return table.cos_sin.data();
  }
  const int pairs = static_cast<int>(config_.rope_dims / 2);
  const std::size_t size = static_cast<std::size_t>(T) * pairs * 2;
  if (ws.rope_table_bytes + size * sizeof(float) > kRopeTableCacheBytes) return nullptr;
  if (ws.rope_tables_used == ws.rope_tables.size()) ws.rope_tables.emplace_back();
  Workspace::RopeTable& table = ws.rope_tables[ws.rope_tables_used++];
  table.offset = offset;
  table.scale = scale;
  table.inv_freq = inv_freq;
  table.cos_sin.ensure(device_, size);
  ws.rope_table_bytes += size * sizeof(float);
  ROW_OP(rope_tables, ws.positions.data() + offset, T, device_scale, 1, inv_freq, pairs, table.cos_sin.data());
  return table.cos_sin.data();
}

// Ms-PoE (Alg. 1 lines 5-10): this layer's per-head scales, from the last
// query's rows before RoPE, fixed for the rest of the sequence.
void Model::apply_head_rope_scales(int layer, Sequence& seq, const float* qkv, int T, float* device_scales,
                                   const ForwardHooks& hooks) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const int heads = static_cast<int>(c.heads), kv_heads = static_cast<int>(c.kv_heads), group = heads / kv_heads;
  const int hd = static_cast<int>(c.head_dim);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const std::size_t qkv_width = q_width + 2 * static_cast<std::size_t>(kv_heads) * hd;
  ws.rows.ensure(device_, static_cast<std::size_t>(heads) * T);
  ROW_OP(last_query_rows, qkv, qkv_width, T, heads, kv_heads, hd, q_width, ws.rows.data());
  ws.host_rows.resize(static_cast<std::size_t>(heads) * T);
  DEVICE_OP(download, ws.host_rows.data(), ws.rows.data(), ws.host_rows.size() * sizeof(float));
  const std::vector<float> scales = hooks.head_rope_scales(layer, ws.host_rows, T);
  if (scales.empty()) return;
  if (scales.size() != static_cast<std::size_t>(heads)) {
    throw std::invalid_argument("forward: head_rope_scales must give one scale per head");
  }
  const int slots = seq.layers_[layer]->slots;
  for (int h = 0; h < heads; ++h) {
    if (!std::isfinite(scales[h]) || scales[h] <= 0.0f) throw std::invalid_argument("forward: head scale must be > 0");
    if (slots == kv_heads && scales[h] != scales[h / group * group]) {
      throw std::logic_error("forward: per-head scales in layer " + std::to_string(layer) +
                             " need a Sequence with per_head_key_slots there");
    }
  }
  std::copy(scales.begin(), scales.end(), seq.scales_.scale.begin() + static_cast<std::ptrdiff_t>(layer) * heads);
  DEVICE_OP(upload, device_scales, scales.data(), sizeof(float) * heads);
}

// Q|K|V rows of `T` normed inputs, with the biases.
void Model::project_qkv(int layer, const float* normed, int T, float* qkv) {
  const ModelConfig& c = config_;
  const Layer& w = layers_[layer];
  const std::size_t qkv_width = std::size_t{c.heads} * c.head_dim + 2 * std::size_t{c.kv_heads} * c.head_dim;
  DEVICE_OP(matmul, *w.qkv, normed, c.hidden, T, qkv, qkv_width);
  add_bias(qkv, T, w.qkv_bias);
}

// The clamp of every Q|K|V value (mpt), then the per-head Q/K norm (qwen3,
// gemma2/3): in place on `T` rows.
void Model::finish_qkv(int layer, float* qkv, int T) {
  const ModelConfig& c = config_;
  const std::size_t qkv_width = std::size_t{c.heads} * c.head_dim + 2 * std::size_t{c.kv_heads} * c.head_dim;
  if (c.clamp_kqv != 0.0f) ROW_OP(cap_values, qkv, static_cast<std::size_t>(T) * qkv_width, c.clamp_kqv, false);
  if (c.qk_norm) norm_qk(layer, qkv, T);
}

// Every Q head and K head of `T` rows normed in place with the layer's weights.
void Model::norm_qk(int layer, float* qkv, int T) {
  const ModelConfig& c = config_;
  const Layer& w = layers_[layer];
  const int hd = static_cast<int>(c.head_dim);
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * std::size_t{c.kv_heads} * c.head_dim;
  ROW_OP(rms_norm_heads, qkv, qkv_width, T, static_cast<int>(c.heads), hd, w.q_norm.data(), c.rms_eps);
  ROW_OP(rms_norm_heads, qkv + q_width, qkv_width, T, static_cast<int>(c.kv_heads), hd, w.k_norm.data(), c.rms_eps);
}

// PHS eq. 2 by linearity: scaling x_c by s adds (s - 1) x_c W[:, c] to every
// K row and to the Q rows from `first_query` on. Where a clamp or a Q/K norm
// follows the projection the rows are not linear in x_c: the projection is
// recomputed, the column added to it, and the clamp and norm applied again.
void Model::scale_qk_channel(int layer, const QkChannelScaling& scaling, float* qkv, const float* normed, int T,
                             int first_query) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t k_width = std::size_t{c.kv_heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * k_width;
  if (scaling.q_column.size() != q_width || scaling.k_column.size() != k_width || scaling.channel < 0 ||
      static_cast<std::uint32_t>(scaling.channel) >= c.hidden) {
    throw std::invalid_argument("forward: qk_channel_scaling does not fit the model");
  }
  const bool linear = !c.qk_norm && c.clamp_kqv == 0.0f;
  if (!linear) project_qkv(layer, normed, T, qkv);
  ws.columns.ensure(device_, q_width + k_width);
  DEVICE_OP(upload, ws.columns.data(), scaling.q_column.data(), sizeof(float) * q_width);
  DEVICE_OP(upload, ws.columns.data() + q_width, scaling.k_column.data(), sizeof(float) * k_width);
  ROW_OP(add_channel_column, qkv, qkv_width, T, q_width, static_cast<int>(k_width), normed, c.hidden, scaling.channel,
         scaling.scale, ws.columns.data() + q_width);
  ROW_OP(add_channel_column, qkv + static_cast<std::size_t>(first_query) * qkv_width, qkv_width, T - first_query, 0,
         static_cast<int>(q_width), normed + static_cast<std::size_t>(first_query) * c.hidden, c.hidden,
         scaling.channel, scaling.scale, ws.columns.data());
  if (!linear) finish_qkv(layer, qkv, T);
}

// The call's keys of every slot into the cache rows [start, start + T), rotated.
void Model::cache_keys(int layer, Sequence& seq, const float* qkv, int T, const float* tables,
                       std::size_t table_stride) {
  const ModelConfig& c = config_;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * std::size_t{c.kv_heads} * c.head_dim;
  DEVICE_OP(cache_keys, *seq.layers_[layer], seq.length_, qkv + q_width, qkv_width, T, static_cast<int>(c.rope_dims),
            c.rope_pairing, tables, table_stride);
}

// Rows [first, T) of the sequence's Q, rotated into `rotated` (q_rot or
// q_far: packed rows of the call).
void Model::rotate_queries(float* rotated, int offset, int T, int first, const float* qkv, const float* tables,
                           std::size_t table_stride) {
  const ModelConfig& c = config_;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * std::size_t{c.kv_heads} * c.head_dim;
  float* dst = rotated + static_cast<std::size_t>(offset + first) * q_width;
  DEVICE_OP(copy_rows, dst, q_width * sizeof(float), qkv + static_cast<std::size_t>(first) * qkv_width,
            qkv_width * sizeof(float), q_width * sizeof(float), T - first);
  ROW_OP(rope_rows, dst, q_width, T - first, static_cast<int>(c.heads), static_cast<int>(c.head_dim),
         static_cast<int>(c.rope_dims), c.rope_pairing, tables + static_cast<std::size_t>(first) * c.rope_dims,
         table_stride);
}

// Attention of the sequence's queries [first, T) over its cached keys; key
// 0's weights (heads x (T - first)) and the last query's rows where asked.
void Model::attend(int layer, Sequence& seq, int offset, int T, int first, bool key0, bool last_row) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const int heads = static_cast<int>(c.heads), hd = static_cast<int>(c.head_dim);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  if (seq.scales_.remaps(layer)) {
    if (key0 || last_row) {
      throw std::logic_error("forward: layer " + std::to_string(layer) +
                             " remaps its attention's distances, which reads out no attention weights");
    }
    attend_remapped(layer, seq, offset, T, first);
    return;
  }
  const int count = T - first;
  if (key0) ws.key0_weight.ensure(device_, static_cast<std::size_t>(heads) * count);
  if (last_row) ws.last_row.ensure(device_, static_cast<std::size_t>(heads) * (seq.length_ + T));
  const std::size_t row = static_cast<std::size_t>(offset + first) * q_width;
  DEVICE_OP(attention, ws.q_rot.data() + row, q_width, *seq.layers_[layer], count, seq.length_ + first, heads,
            static_cast<int>(c.layer_window(layer)), c.attention_scale * seq.scales_.score_factor_at(layer),
            ScoreShaping{c.attn_softcap, c.max_alibi_bias}, ws.attn.data() + row, q_width,
            AttentionReadouts{key0 ? ws.key0_weight.data() : nullptr, last_row ? ws.last_row.data() : nullptr});
}

// A remapped attention (DistanceRemap) of the sequence's queries [first, T):
// the near keys (distance < W) with the rotated queries, the far keys with
// the far-rotated ones, each part's log-sum-exp read out, the two merged.
// Query a (its index in the sequence) sees the far keys [.., a - W]: the
// far part is an attention whose queries sit W keys earlier in the cache,
// and whose sliding window (if the layer has one) is W shorter.
void Model::attend_remapped(int layer, Sequence& seq, int offset, int T, int first) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const DistanceRemap& remap = seq.scales_.distance_remap;
  const int heads = static_cast<int>(c.heads), hd = static_cast<int>(c.head_dim);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const int near = remap.near_window, window = static_cast<int>(c.layer_window(layer));
  const int count = T - first, past = seq.length_ + first;
  const float scale = c.attention_scale * seq.scales_.score_factor_at(layer);
  const ScoreShaping shaping{c.attn_softcap, c.max_alibi_bias};
  ws.log_sum_exp.ensure(device_, 2 * static_cast<std::size_t>(heads) * count);
  float* near_lse = ws.log_sum_exp.data();
  float* far_lse = near_lse + static_cast<std::size_t>(heads) * count;
  const std::size_t row = static_cast<std::size_t>(offset + first) * q_width;
  DEVICE_OP(attention, ws.q_rot.data() + row, q_width, *seq.layers_[layer], count, past, heads,
            window > 0 ? std::min(window, near) : near, scale, shaping, ws.attn.data() + row, q_width,
            AttentionReadouts{nullptr, nullptr, near_lse});
  if (window > 0 && window <= near) return;   // the layer's own window holds no far key
  const int skip = std::max(0, near - past);  // the first rows have no key that far back
  const int far_count = count - skip;
  if (far_count <= 0) return;
  const LayerKv& far_kv = remap.moves_keys() ? *seq.far_layers_[layer] : *seq.layers_[layer];
  const std::size_t far_row = row + static_cast<std::size_t>(skip) * q_width;
  DEVICE_OP(attention, ws.q_far.data() + far_row, q_width, far_kv, far_count, past + skip - near, heads,
            window > 0 ? window - near : 0, scale, shaping, ws.attn_far.data() + far_row, q_width,
            AttentionReadouts{nullptr, nullptr, far_lse});
  ROW_OP(merge_attention, ws.attn.data() + far_row, q_width, near_lse + skip, static_cast<std::size_t>(count),
         ws.attn_far.data() + far_row, q_width, far_lse, static_cast<std::size_t>(far_count), far_count, heads, hd);
}

// A remapped attention's far half of the call's rows: its queries [first,
// T) rotated at their far positions into q_far and, where the remap moves
// the keys, the keys and values into the far cache, the keys rotated at
// theirs. `tables` RoPE tables a row: 1, or one per query head.
void Model::prepare_far_half(int layer, Sequence& seq, int offset, int T, int first, const float* qkv,
                             const float* device_scales, int tables, const double* inv_freq) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const int heads = static_cast<int>(c.heads), pairs = static_cast<int>(c.rope_dims / 2);
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim, kv_width = std::size_t{c.kv_heads} * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * kv_width;
  const std::size_t table_size = static_cast<std::size_t>(T) * pairs * 2;
  const bool moves_keys = seq.scales_.distance_remap.moves_keys();
  ws.far_tables.ensure(device_, (moves_keys ? 2 : 1) * tables * table_size);
  float* query_tables = ws.far_tables.data();
  ROW_OP(rope_tables, ws.far_positions.data() + offset, T, device_scales, tables, inv_freq, pairs, query_tables);
  rotate_queries(ws.q_far.data(), offset, T, first, qkv, query_tables, tables == 1 ? 0 : table_size);
  if (!moves_keys) return;
  LayerKv& far_kv = *seq.far_layers_[layer];
  float* key_tables = query_tables + tables * table_size;
  ROW_OP(rope_tables, ws.far_positions.data() + ws.far_key_positions_at + offset, T, device_scales, tables, inv_freq,
         pairs, key_tables);
  DEVICE_OP(cache_values, far_kv, seq.length_, qkv + q_width + kv_width, qkv_width, T);
  DEVICE_OP(cache_keys, far_kv, seq.length_, qkv + q_width, qkv_width, T, static_cast<int>(c.rope_dims), c.rope_pairing,
            key_tables, tables == 1 ? 0 : far_kv.slot_table_stride(heads, table_size));
}

// Every packed row's far query and key positions (DistanceRemap) where a
// sequence of the call remaps its attention (a row of another sequence
// keeps its own position, unread).
void Model::upload_far_positions(std::span<const SequenceCall> calls, const std::vector<int>& offsets,
                                 const std::vector<double>& positions) {
  Workspace& ws = *ws_;
  ws.far_key_positions_at = 0;
  const bool any = std::any_of(calls.begin(), calls.end(),
                               [](const SequenceCall& call) { return call.sequence->scales_.distance_remap.on(); });
  if (!any) return;
  const std::size_t N = positions.size();
  std::vector<double> far(2 * N);
  std::copy(positions.begin(), positions.end(), far.begin());
  std::copy(positions.begin(), positions.end(), far.begin() + N);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const DistanceRemap& remap = calls[i].sequence->scales_.distance_remap;
    if (!remap.on()) continue;
    for (std::size_t r = offsets[i]; r < offsets[i] + calls[i].tokens.size(); ++r) {
      far[r] = remap.far_query_position(positions[r]);
      far[N + r] = remap.far_key_position(positions[r]);
    }
  }
  ws.far_positions.ensure(device_, far.size());
  DEVICE_OP(upload, ws.far_positions.data(), far.data(), far.size() * sizeof(double));
  ws.far_key_positions_at = static_cast<int>(N);
}

// SIW: out += (alpha - 1) p0 v0 for the sequence's queries [first, T).
void Model::correct_key0(int layer, Sequence& seq, int offset, int T, int first) {
  const ModelConfig& c = config_;
  Workspace& ws = *ws_;
  const std::size_t q_width = std::size_t{c.heads} * c.head_dim;
  DEVICE_OP(add_key0_correction, ws.attn.data() + static_cast<std::size_t>(offset + first) * q_width, q_width,
            T - first, static_cast<int>(c.heads), *seq.layers_[layer], ws.key0_weight.data(),
            ws.factors.data() + first);
}

// ---------------------------------------------------------------- results

std::vector<float> Model::download_logits() const {
  std::vector<float> out(static_cast<std::size_t>(logit_rows_) * config_.vocab);
  DEVICE_OP(download, out.data(), ws_->logits.data(), out.size() * sizeof(float));
  return out;
}

void Model::score(std::span<const std::int32_t> gold, std::vector<std::int32_t>& argmax,
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
    DEVICE_OP(upload, ws.gold.data(), gold.data(), gold.size() * sizeof(std::int32_t));
  }
  ROW_OP(score_rows, ws.logits.data(), R, vocab(), gold.empty() ? nullptr : ws.gold.data(), ws.argmax.data(),
         ws.gold_logprob.data());
  DEVICE_OP(download, argmax.data(), ws.argmax.data(), argmax.size() * sizeof(std::int32_t));
  if (!gold.empty())
    DEVICE_OP(download, gold_logprob.data(), ws.gold_logprob.data(), gold_logprob.size() * sizeof(double));
}

}  // namespace midtune::engine
