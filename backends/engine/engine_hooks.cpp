#include "backends/engine/engine_hooks.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backends/engine/hooks/mspoe_order.hpp"
#include "backends/engine/hooks/position_map.hpp"
#include "backends/engine/ops/dequant.hpp"

namespace midtune::engine::hooks {
namespace {

// Column `column` of the GGUF matrix `name` (rows x cols, ggml row-major).
std::vector<float> matrix_column(const GgufFile& file, const std::string& name, int column) {
  const GgufTensorInfo& info = file.tensor(name);
  if (info.type == nullptr || info.dims.empty()) throw std::invalid_argument(name + ": unsupported tensor type");
  const std::size_t cols = info.dims[0], rows = info.rows();
  const std::size_t row_bytes = info.n_bytes / rows;
  const std::byte* data = file.tensor_data(info).data();
  std::vector<float> row(cols), out(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    dequantize_row(info.type->type, data + r * row_bytes, row.data(), cols);
    out[r] = row[static_cast<std::size_t>(column)];
  }
  return out;
}

}  // namespace

ModelShape shape_of(const Model& model) {
  const ModelConfig& c = model.config();
  return ModelShape{.layers = static_cast<int>(c.layers), .heads = static_cast<int>(c.heads),
                    .kv_heads = static_cast<int>(c.kv_heads), .hidden = static_cast<int>(c.hidden)};
}

EngineIntervention::EngineIntervention(const Model& model, const Intervention& intervention, int prompt_tokens,
                                       std::vector<TokenSpan> chunks)
    : model_(model), intervention_(intervention), prompt_tokens_(prompt_tokens), chunks_(std::move(chunks)) {
  const ModelConfig& c = model.config();
  const int layers = static_cast<int>(c.layers), heads = static_cast<int>(c.heads);
  validate_intervention(intervention_, shape_of(model));
  if (prompt_tokens <= 0) throw std::invalid_argument("intervention: the prompt has no tokens");
  check_token_spans(chunks_, prompt_tokens, "intervention chunks");

  scales_ = RopeScales::ones(layers, heads);
  scales_.scale = rope_scales_per_head(intervention_.rope_scale, layers, heads);
  if (intervention_.mspoe) {
    // Each head of a GQA group gets its own ratio in the prefill, so its keys
    // need their own slot from the start.
    scales_.per_head_key_slots.assign(static_cast<std::size_t>(layers), 0);
    for (int l = intervention_.mspoe->first_layer; l < layers; ++l) scales_.per_head_key_slots[l] = 1;
    hooks_.head_rope_scales = [this](int layer, std::span<const float> qkv, int tokens) {
      return assign_mspoe(layer, qkv, tokens);
    };
    any_hook_ = true;
  }
  if (intervention_.position_map) positions_ = calibrated_positions(*intervention_.position_map, prompt_tokens, chunks_);
  if (intervention_.siw) {
    hooks_.last_query_row_layers.assign(static_cast<std::size_t>(layers), 0);
    for (int l : intervention_.siw->layers) hooks_.last_query_row_layers[l] = 1;
    hooks_.last_query_row = [this](int layer, std::span<const float> rows, int keys, int start, int tokens) {
      read_siw_density(layer, rows, keys, start, tokens);
    };
    hooks_.key0_weight_factors = [this](int layer, int start, int tokens) { return siw_factors(layer, start, tokens); };
    any_hook_ = true;
  }
  if (intervention_.hidden_channel) {
    const HiddenChannel& phs = *intervention_.hidden_channel;
    for (int l : phs.layers) {
      const std::string p = "blk." + std::to_string(l) + ".";
      phs_q_column_[l] = matrix_column(model.file(), p + "attn_q.weight", phs.channel);
      phs_k_column_[l] = matrix_column(model.file(), p + "attn_k.weight", phs.channel);
    }
    hooks_.scale_qk_channels = [this](int layer, std::span<const float> normed, std::span<float> qkv, int tokens,
                                      int first_query) {
      return scale_qk_channels(layer, normed, qkv, tokens, first_query);
    };
    any_hook_ = true;
  }
  hooks_.whole_prompt = any_hook_;
}

// Ms-PoE eq. 1 on softmax(q_last . K^T / sqrt(d)) before RoPE, per query head.
std::vector<float> EngineIntervention::assign_mspoe(int layer, std::span<const float> qkv, int T) {
  const MsPoe& m = *intervention_.mspoe;
  if (layer < m.first_layer) return {};
  if (T != prompt_tokens_) throw std::invalid_argument("Ms-PoE: the first forward call must hold exactly the prompt");
  const ModelConfig& c = model_.config();
  const int hd = static_cast<int>(c.head_dim), heads = static_cast<int>(c.heads);
  const int group = heads / static_cast<int>(c.kv_heads);
  const std::size_t q_width = static_cast<std::size_t>(heads) * hd;
  const std::size_t qkv_width = q_width + 2 * static_cast<std::size_t>(c.kv_heads) * hd;
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<float> rows(static_cast<std::size_t>(heads) * T);
  std::vector<double> score(static_cast<std::size_t>(T));
  for (int h = 0; h < heads; ++h) {
    const float* q = qkv.data() + static_cast<std::size_t>(T - 1) * qkv_width + static_cast<std::size_t>(h) * hd;
    double top = -INFINITY;
    for (int j = 0; j < T; ++j) {
      const float* k = qkv.data() + static_cast<std::size_t>(j) * qkv_width + q_width + static_cast<std::size_t>(h / group) * hd;
      double dot = 0.0;
      for (int i = 0; i < hd; ++i) dot += static_cast<double>(q[i]) * k[i];
      score[j] = dot * inv_sqrt;
      top = std::max(top, score[j]);
    }
    double sum = 0.0;
    for (int j = 0; j < T; ++j) sum += (score[j] = std::exp(score[j] - top));
    for (int j = 0; j < T; ++j) rows[static_cast<std::size_t>(h) * T + j] = static_cast<float>(score[j] / sum);
  }
  std::vector<double>& awareness = mspoe_awareness_[layer];
  for (int h = 0; h < heads; ++h) {
    awareness.push_back(awareness_score(std::span<const float>(rows).subspan(static_cast<std::size_t>(h) * T, T), m.alpha));
  }
  const std::vector<double> ratios = head_ratios(m, rows, heads, T, layer);
  std::vector<float> out(ratios.begin(), ratios.end());
  mspoe_scales_[layer] = out;
  return out;
}

// SIW: the dense chunks, from the prefill's last row (head mean).
void EngineIntervention::read_siw_density(int layer, std::span<const float> rows, int keys, int start, int tokens) {
  if (start != 0) return;  // decided once, in the prefill
  if (tokens != prompt_tokens_) throw std::invalid_argument("SIW: the first forward call must hold exactly the prompt");
  const int heads = static_cast<int>(model_.config().heads);
  siw_dense_[layer] = find_dense_chunks(head_mean_row(rows, heads, keys), chunks_, intervention_.siw->sigma);
}

std::vector<float> EngineIntervention::siw_factors(int layer, int start, int tokens) const {
  if (hooks_.last_query_row_layers[static_cast<std::size_t>(layer)] == 0) return {};
  const auto found = siw_dense_.find(layer);
  if (found == siw_dense_.end()) throw std::logic_error("SIW: a later call before the prompt's prefill");
  // Factors for the whole sequence so far, then this call's slice.
  const std::vector<float> all = query_factors(*intervention_.siw, start + tokens, chunks_, found->second);
  return std::vector<float>(all.begin() + start, all.end());
}

// PHS eq. 2 by linearity: scaling x_c by s adds (s - 1) x_c W[:, c].
bool EngineIntervention::scale_qk_channels(int layer, std::span<const float> normed, std::span<float> qkv, int T,
                                    int first_query) const {
  const auto q_col = phs_q_column_.find(layer);
  if (q_col == phs_q_column_.end()) return false;
  const std::vector<float>& k_col = phs_k_column_.at(layer);
  const ModelConfig& c = model_.config();
  const std::size_t hidden = c.hidden;
  const std::size_t q_width = static_cast<std::size_t>(c.heads) * c.head_dim;
  const std::size_t qkv_width = q_width + 2 * k_col.size();
  const HiddenChannel& phs = *intervention_.hidden_channel;
  for (int t = 0; t < T; ++t) {
    const float delta = static_cast<float>((phs.scale - 1.0) * normed[t * hidden + phs.channel]);
    float* row = qkv.data() + t * qkv_width;
    for (std::size_t i = 0; i < k_col.size(); ++i) row[q_width + i] += delta * k_col[i];
    if (t >= first_query) {
      for (std::size_t i = 0; i < q_width; ++i) row[i] += delta * q_col->second[i];
    }
  }
  return true;
}

}  // namespace midtune::engine::hooks
