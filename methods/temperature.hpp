// Attention temperature (docs/methods.md "Attention temperature"): in the
// chosen layers every attention logit is divided by a temperature t before
// the softmax, softmax(q . k / (t sqrt(d))): YaRN's temperature (Peng et
// al. 2023), which sets sqrt(1/t) = 0.1 ln(s) + 1 beside a RoPE scale s.
// t > 1 flattens each query's attention over its keys, t < 1 sharpens it.
// This module holds its parameters, genes, JSON and validation; the
// engine applies it as a factor 1/t on the layer's attention scale, fixed
// for the sequence's life (backends/engine/model.hpp, SequenceScales).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune {

struct MethodModule;

// t = 1 is the plain model.
struct AttentionTemperature {
  double temperature = 1.0;
  std::vector<int> layers;  // layer indices where the logits are divided by t
  bool operator==(const AttentionTemperature&) const = default;
};

nlohmann::json temperature_to_json(const AttentionTemperature& temperature);
// Throws std::invalid_argument "intervention.attention_temperature.<field>: ...".
AttentionTemperature temperature_from_json(const nlohmann::json& j);
// t finite and in [kMinScale, kMaxScale], a non-empty list of the model's layers.
void validate_temperature(const AttentionTemperature& temperature, const ModelShape& model);
// The layer range [first_layer, last_layer] becomes the layer list.
AttentionTemperature temperature_from_genes(const GeneValues& genes);

const MethodModule& temperature_method();

}  // namespace midtune
