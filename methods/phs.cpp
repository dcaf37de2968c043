#include "methods/phs.hpp"

#include <cmath>

#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

namespace check = method_checks;
using nlohmann::json;

constexpr long long kMaxChannel = 1000000;  // validate() checks the model's real hidden size

// The channel comes from phs-search: it has no portable default.
std::vector<GeneSchema> genes() {
  const HiddenChannel paper;
  constexpr double kMaxLayer = 1023;  // validate() checks the model's real layer count
  return {
      // A 7B's hidden state has 3,584 channels or more: the bound is the
      // JSON form's, and validate() checks the model's hidden size.
      {"channel",
       GeneType::integer,
       std::nullopt,
       0,
       static_cast<double>(kMaxChannel),
       {},
       "hidden-state channel (from phs-search)"},
      {"scale", GeneType::real, paper.scale, -10, 10, {}, "factor applied to the channel"},
      {"first_layer",
       GeneType::integer,
       static_cast<double>(kPhsPaperFirstLayer),
       0,
       kMaxLayer,
       {},
       "first layer scaled",
       kPhsPaperModelLayers},
      {"last_layer",
       GeneType::integer,
       static_cast<double>(kPhsPaperLastLayer),
       0,
       kMaxLayer,
       {},
       "last layer scaled",
       kPhsPaperModelLayers},
  };
}

}  // namespace

json hidden_channel_to_json(const HiddenChannel& phs) {
  return {{"channel", phs.channel}, {"scale", phs.scale}, {"layers", phs.layers}};
}

HiddenChannel hidden_channel_from_json(const json& m) {
  check::reject_unknown(m, "hidden_channel", {"channel", "scale", "layers"});
  HiddenChannel h;
  if (!m.contains("channel") || !m["channel"].is_number_integer() || m["channel"].get<long long>() < 0 ||
      m["channel"].get<long long>() > kMaxChannel)
    check::bad("hidden_channel.channel", "missing or not an integer >= 0");
  h.channel = m["channel"].get<int>();
  h.scale = check::number(m, "hidden_channel.scale", h.scale);
  h.layers = check::layer_list(m, "hidden_channel.layers");
  return h;
}

void validate_hidden_channel(const HiddenChannel& phs, const ModelShape& model) {
  if (phs.channel < 0 || phs.channel >= model.hidden) {
    check::bad("hidden_channel.channel", std::to_string(phs.channel) + " is outside the hidden size " +
                                             std::to_string(model.hidden) + " (channels 0.." +
                                             std::to_string(model.hidden - 1) + ")");
  }
  if (!std::isfinite(phs.scale)) check::bad("hidden_channel.scale", "must be finite");
  check::check_layer_list(phs.layers, "hidden_channel.layers", model);
}

std::pair<int, int> phs_paper_layers(int layers) {
  return {paper_layer_for_depth(kPhsPaperFirstLayer, kPhsPaperModelLayers, layers),
          paper_layer_for_depth(kPhsPaperLastLayer, kPhsPaperModelLayers, layers)};
}

HiddenChannel hidden_channel_from_genes(const GeneValues& genes) {
  HiddenChannel h;
  h.channel = genes.integer("channel");
  h.scale = genes.number("scale");
  h.layers = check::gene_layer_range(genes);
  return h;
}

const MethodModule& phs_method() {
  static const MethodModule module = optional_field_method<HiddenChannel>(
      "phs", "hidden_channel", Mechanism::qk_channel_scaling,
      &Intervention::hidden_channel, genes(), {{"first_layer", "last_layer"}},
      {hidden_channel_to_json, hidden_channel_from_json, validate_hidden_channel, hidden_channel_from_genes},
      HiddenChannel{.channel = 0, .scale = 1.0, .layers = {0}});
  return module;
}

}  // namespace midtune
