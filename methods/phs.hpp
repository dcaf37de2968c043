// PHS (docs/methods.md "PHS"): scale one channel of the normed hidden state feeding
// Q and K, recompute the last token's attention row. This module holds
// everything about PHS that is not model math: its parameters (the
// Intervention's `hidden_channel`), genes and paper defaults, JSON,
// validation against the model, decoding gene values. The scaling runs in the
// engine (backends/engine/engine_hooks.cpp); finding the channel is
// backends/engine/tools/phs_channel_search.hpp.
#pragma once

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune {

struct MethodModule;

struct HiddenChannel {
  int channel = 0;
  double scale = 0.0;  // the paper's factor: the channel zeroed
  std::vector<int> layers;
  bool operator==(const HiddenChannel&) const = default;
};

// The paper scales layers 10..25 of its 32-layer models (the gene table's defaults).
inline constexpr int kPhsPaperFirstLayer = 10;
inline constexpr int kPhsPaperLastLayer = 25;
inline constexpr int kPhsPaperModelLayers = 32;
// The paper's layer range scaled to a model with `layers` layers (first, last).
std::pair<int, int> phs_paper_layers(int layers);

nlohmann::json hidden_channel_to_json(const HiddenChannel& phs);
// Throws std::invalid_argument "intervention.hidden_channel.<field>: ...".
HiddenChannel hidden_channel_from_json(const nlohmann::json& j);
// The channel below the hidden size, a finite scale, a non-empty list of the model's layers.
void validate_hidden_channel(const HiddenChannel& phs, const ModelShape& model);
// The layer range [first_layer, last_layer] becomes the layer list.
HiddenChannel hidden_channel_from_genes(const GeneValues& genes);

const MethodModule& phs_method();

}  // namespace midtune
