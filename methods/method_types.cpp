#include "methods/method_types.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "methods/method_checks.hpp"

namespace midtune {

nlohmann::json gene_number_to_json(double number) {
  // Integral values print as integers, so integer genes load back as integers.
  constexpr double kLimit = 9.0e15;  // exactly representable as int64 and double
  if (std::trunc(number) == number && std::abs(number) < kLimit) {
    return static_cast<std::int64_t>(number);
  }
  return number;
}

nlohmann::json gene_value_to_json(const GeneValue& value) {
  if (const auto* number = std::get_if<double>(&value)) return gene_number_to_json(*number);
  return std::get<std::string>(value);
}

std::string gene_value_to_string(const GeneValue& value) {
  if (const auto* text = std::get_if<std::string>(&value)) return *text;
  std::ostringstream out;
  out << std::get<double>(value);
  return out.str();
}

int paper_layer_for_depth(int paper_layer, int paper_layers, int layers) {
  return static_cast<int>(std::lround(static_cast<double>(paper_layer) * layers / paper_layers));
}

const char* to_string(GeneType type) {
  switch (type) {
    case GeneType::integer: return "integer";
    case GeneType::real: return "real";
    case GeneType::categorical: return "categorical";
  }
  return "?";
}

const char* to_string(Mechanism mechanism) {
  switch (mechanism) {
    case Mechanism::layer_rope_scales: return "layer_rope_scales";
    case Mechanism::prompt_head_rope_scales: return "prompt_head_rope_scales";
    case Mechanism::prompt_positions: return "prompt_positions";
    case Mechanism::key0_weight: return "key0_weight";
    case Mechanism::qk_channel_scaling: return "qk_channel_scaling";
    case Mechanism::layer_score_scales: return "layer_score_scales";
    case Mechanism::distance_remap:
      return "distance_remap";
  }
  return "?";
}

MechanismNeeds mechanism_needs(Mechanism mechanism) {
  switch (mechanism) {
    // Scales are fixed before the pass: one call, prefixes shareable.
    case Mechanism::layer_rope_scales: return {.rope_positions = true};
    // Ms-PoE ranks heads by the last query's attention over the whole prompt
    // and sends the layer's scales back before its RoPE.
    case Mechanism::prompt_head_rope_scales:
      return {.prompt_alone = true, .one_call_prefill = true, .host_round_trip = true, .rope_positions = true};
    // Positions depend on the prompt's length and chunks; gold tokens then
    // continue after the last remapped position. Positions are per token, so
    // a chunked prefill computes the same.
    case Mechanism::prompt_positions: return {.prompt_alone = true, .rope_positions = true};
    // SIW reads the prefill's last row per layer and sends factors back.
    case Mechanism::key0_weight:
      return {.prompt_alone = true, .one_call_prefill = true, .host_round_trip = true};
    // PHS recomputes the prompt's last row in the prefill; its scaling is data
    // a device applies where the rows live.
    case Mechanism::qk_channel_scaling: return {.prompt_alone = true, .one_call_prefill = true};
    // A factor per layer fixed before the pass, as RoPE scales are; it
    // scales q . k whatever the positions, so ALiBi models take it too.
    case Mechanism::layer_score_scales: return {};
    // Positions fixed per sequence as RoPE scales are (prefixes shareable);
    // it moves RoPE positions, so a model without RoPE refuses it.
    case Mechanism::distance_remap:
      return {.rope_positions = true};
  }
  return {};
}

const char* mechanism_conflict(Mechanism a, Mechanism b) {
  const auto either = [&](Mechanism m) { return a == m || b == m; };
  if (a == Mechanism::distance_remap && b == Mechanism::distance_remap) {
    return "each remaps the attention's distances, and a layer takes one remap";
  }
  if (either(Mechanism::distance_remap) && either(Mechanism::key0_weight)) {
    return "a remapped attention is two attentions merged, which read out no weight on key 0 to rescale";
  }
  return nullptr;
}

MechanismNeeds& MechanismNeeds::operator|=(const MechanismNeeds& other) {
  prompt_alone = prompt_alone || other.prompt_alone;
  one_call_prefill = one_call_prefill || other.one_call_prefill;
  host_round_trip = host_round_trip || other.host_round_trip;
  rope_positions = rope_positions || other.rope_positions;
  return *this;
}

const GeneValue& GeneValues::at(const std::string& name) const {
  const auto found = values_.find(name);
  if (found == values_.end()) throw std::logic_error(method_ + ": no value for gene '" + name + "'");
  return found->second;
}

double GeneValues::number(const std::string& name) const {
  const auto* d = std::get_if<double>(&at(name));
  if (d == nullptr) throw std::logic_error(method_ + "." + name + ": expected a number");
  return *d;
}

int GeneValues::integer(const std::string& name) const { return static_cast<int>(std::lround(number(name))); }

const std::string& GeneValues::text(const std::string& name) const {
  const auto* s = std::get_if<std::string>(&at(name));
  if (s == nullptr) throw std::logic_error(method_ + "." + name + ": expected a text value");
  return *s;
}

namespace method_checks {
namespace {

using nlohmann::json;

constexpr long long kMaxLayerIndex = 1000000;  // the model's real count is checked by validate()

std::string key_of(const std::string& field) { return field.substr(field.rfind('.') + 1); }

}  // namespace

void bad(const std::string& field, const std::string& reason) {
  throw std::invalid_argument("intervention." + field + ": " + reason);
}

void reject_unknown(const json& j, const std::string& where, std::initializer_list<const char*> known) {
  if (!j.is_object()) bad(where, "must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) bad(where.empty() ? it.key() : where + "." + it.key(), "unknown field");
  }
}

double number(const json& section, const std::string& field, double fallback) {
  if (!section.contains(key_of(field))) return fallback;
  const json& v = section.at(key_of(field));
  if (!v.is_number()) bad(field, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) bad(field, "must be finite");
  return d;
}

int layer_index(const json& section, const std::string& field, int fallback) {
  if (!section.contains(key_of(field))) return fallback;
  const json& v = section.at(key_of(field));
  if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > kMaxLayerIndex)
    bad(field, "must be an integer layer index >= 0");
  return v.get<int>();
}

int token_count(const json& section, const std::string& field, int fallback) {
  if (!section.contains(key_of(field))) return fallback;
  const json& v = section.at(key_of(field));
  if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > kMaxTokenCount)
    bad(field, "must be an integer count of tokens in [1, " + std::to_string(kMaxTokenCount) + "]");
  return v.get<int>();
}

std::vector<int> layer_list(const json& section, const std::string& field) {
  std::vector<int> out;
  if (!section.contains(key_of(field))) return out;
  const json& list = section.at(key_of(field));
  if (!list.is_array()) bad(field, "must be a list of layer indices");
  for (const json& v : list) {
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > kMaxLayerIndex)
      bad(field, "entries must be integer layer indices >= 0");
    out.push_back(v.get<int>());
  }
  return out;
}

void check_layer(int layer, const std::string& field, const ModelShape& model) {
  if (layer < 0 || layer >= model.layers) {
    bad(field, std::to_string(layer) + " is outside the model's layers 0.." + std::to_string(model.layers - 1));
  }
}

void check_layer_list(const std::vector<int>& layers, const std::string& field, const ModelShape& model) {
  if (layers.empty()) bad(field, "must name at least one layer");
  for (int l : layers) {
    if (l < 0 || l >= model.layers) {
      bad(field, "layer " + std::to_string(l) + " is outside the model's layers 0.." +
                     std::to_string(model.layers - 1));
    }
  }
}

void check_scale(double value, const std::string& field) {
  if (std::isfinite(value) && value >= kMinScale && value <= kMaxScale) return;
  std::ostringstream text;
  text << "intervention." << field << ": " << value << " is not a finite number in [" << kMinScale << ", "
       << kMaxScale << "]";
  throw InvalidValue(text.str());
}

std::vector<int> gene_layer_range(const GeneValues& genes) {
  std::vector<int> layers;
  for (int l = genes.integer("first_layer"); l <= genes.integer("last_layer"); ++l) layers.push_back(l);
  return layers;
}

void check_at_least(double value, double lowest, const std::string& field) {
  if (!std::isfinite(value) || value < lowest) {
    std::ostringstream text;
    text << "must be finite and >= " << lowest;
    bad(field, text.str());
  }
}

}  // namespace method_checks
}  // namespace midtune
