#include "backends/engine/engine_hooks.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "backends/engine/hooks/mspoe_order.hpp"
#include "backends/engine/hooks/position_map.hpp"
#include "backends/engine/ops/dequant.hpp"
#include "methods/registry.hpp"

namespace midtune::engine::hooks {
namespace {

// Column `column` of rows [first, first + count) of the GGUF matrix `name`
// (rows x cols, ggml row-major).
std::vector<float> matrix_column(const GgufFile& file, const std::string& name, int column, std::size_t first,
                                 std::size_t count) {
  const GgufTensorInfo& info = file.tensor(name);
  if (info.type == nullptr || info.dims.empty()) throw std::invalid_argument(name + ": unsupported tensor type");
  const std::size_t cols = info.dims[0], rows = info.rows();
  if (first + count > rows) throw std::invalid_argument(name + ": fewer rows than the model's Q and K");
  const std::size_t row_bytes = info.n_bytes / rows;
  const std::byte* data = file.tensor_data(info).data();
  std::vector<float> row(cols), out(count);
  for (std::size_t r = 0; r < count; ++r) {
    dequantize_row(info.type->type, data + (first + r) * row_bytes, row.data(), cols);
    out[r] = row[static_cast<std::size_t>(column)];
  }
  return out;
}

}  // namespace

bool read_after_load(const std::string& tensor_name) {
  const auto ends_with = [&](std::string_view suffix) {
    return tensor_name.size() >= suffix.size() &&
           tensor_name.compare(tensor_name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  // The names matrix_column is called with below.
  return ends_with(".attn_q.weight") || ends_with(".attn_k.weight") || ends_with(".attn_qkv.weight");
}

ModelShape shape_of(const Model& model) { return shape_of(model.config()); }

ModelShape shape_of(const ModelConfig& c) {
  return ModelShape{.layers = static_cast<int>(c.layers), .heads = static_cast<int>(c.heads),
                    .kv_heads = static_cast<int>(c.kv_heads), .hidden = static_cast<int>(c.hidden),
                    .rope = c.has_rope(), .architecture = c.arch};
}

SequenceScales sequence_scales(const ModelConfig& c, const Intervention& intervention) {
  SequenceScales s = SequenceScales::ones(static_cast<int>(c.layers), static_cast<int>(c.heads));
  s.scale = rope_scales_per_head(intervention.rope_scale, s.layers, s.heads);
  if (intervention.attention_temperature) {  // logits / t: the factor 1 / t on the attention scale
    s.score_factor.assign(c.layers, 1.0f);
    for (int l : intervention.attention_temperature->layers) {
      s.score_factor[static_cast<std::size_t>(l)] = static_cast<float>(1.0 / intervention.attention_temperature->temperature);
    }
  }
  // SelfExtend (LongLM Alg. 1): far query floor(i / G) + shift, far key
  // floor(j / G). STRING (An et al. sec. 4): far distance d - S + W.
  const std::vector<int>* remapped = nullptr;
  if (const auto& se = intervention.self_extend) {
    s.distance_remap = {se->window, se->group, static_cast<double>(self_extend_query_shift(*se))};
    remapped = &se->layers;
  } else if (const auto& st = intervention.string_shift) {
    s.distance_remap = {st->shift, 1, static_cast<double>(string_query_shift(*st))};
    remapped = &st->layers;
  }
  if (remapped != nullptr) {
    s.remapped_layers.assign(c.layers, 0);
    for (int l : *remapped) s.remapped_layers[static_cast<std::size_t>(l)] = 1;
  }
  return s;
}

EngineIntervention::EngineIntervention(const Model& model, const Intervention& intervention, int prompt_tokens,
                                       std::vector<TokenSpan> chunks)
    : EngineIntervention(model.config(), model.file(), intervention, prompt_tokens, std::move(chunks)) {}

EngineIntervention::EngineIntervention(const ModelConfig& config, const GgufFile& file,
                                       const Intervention& intervention, int prompt_tokens,
                                       std::vector<TokenSpan> chunks)
    : config_(config), intervention_(intervention), prompt_tokens_(prompt_tokens), chunks_(std::move(chunks)) {
  const ModelConfig& c = config_;
  const int layers = static_cast<int>(c.layers);
  validate_intervention(intervention_, shape_of(c));
  if (prompt_tokens <= 0) throw std::invalid_argument("intervention: the prompt has no tokens");
  check_token_spans(chunks_, prompt_tokens, "intervention chunks");

  scales_ = hooks::sequence_scales(c, intervention_);
  if (intervention_.mspoe) {
    // Each head of a GQA group gets its own ratio in the prefill, so its keys
    // need their own slot from the start.
    scales_.per_head_key_slots.assign(static_cast<std::size_t>(layers), 0);
    for (int l = intervention_.mspoe->first_layer; l < layers; ++l) scales_.per_head_key_slots[l] = 1;
    hooks_.head_rope_scale_layers = scales_.per_head_key_slots;  // the same layers: first_layer on
    hooks_.head_rope_scales = [this](int layer, std::span<const float> rows, int tokens) {
      return assign_mspoe(layer, rows, tokens);
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
      QkChannelScaling& scaling = phs_scaling_[l];
      scaling.channel = phs.channel;
      scaling.scale = phs.scale;
      const std::size_t q_rows = std::size_t{c.heads} * c.head_dim, k_rows = std::size_t{c.kv_heads} * c.head_dim;
      if (file.find_tensor(p + "attn_qkv.weight") != nullptr) {  // fused (phi3, mpt): Q rows, then K rows, then V
        scaling.q_column = matrix_column(file, p + "attn_qkv.weight", phs.channel, 0, q_rows);
        scaling.k_column = matrix_column(file, p + "attn_qkv.weight", phs.channel, q_rows, k_rows);
      } else {
        scaling.q_column = matrix_column(file, p + "attn_q.weight", phs.channel, 0, q_rows);
        scaling.k_column = matrix_column(file, p + "attn_k.weight", phs.channel, 0, k_rows);
      }
    }
    hooks_.qk_channel_scaling = [this](int layer) -> const QkChannelScaling* {
      const auto found = phs_scaling_.find(layer);
      return found == phs_scaling_.end() ? nullptr : &found->second;
    };
    any_hook_ = true;
  }
  hooks_.whole_prompt = intervention_needs(intervention_).one_call_prefill;
}

// Ms-PoE eq. 1 on the last query's softmax rows before RoPE, per query head.
std::vector<float> EngineIntervention::assign_mspoe(int layer, std::span<const float> rows, int T) {
  const MsPoe& m = *intervention_.mspoe;
  if (layer < m.first_layer) return {};
  if (T != prompt_tokens_) throw std::invalid_argument("Ms-PoE: the first forward call must hold exactly the prompt");
  const int heads = static_cast<int>(config_.heads);
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
  const int heads = static_cast<int>(config_.heads);
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

}  // namespace midtune::engine::hooks
