#include "methods/temperature.hpp"

#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

namespace check = method_checks;
using nlohmann::json;

// t = 1 (the plain model) by default: YaRN's value depends on the RoPE
// scale it goes with, and the layer range on the model, so an experiment
// sets them (docs/methods.md lists YaRN's t for common scales).
std::vector<GeneSchema> genes() {
  const AttentionTemperature plain;
  constexpr double kMaxLayer = 1023;  // validate() checks the model's real layer count
  return {
      {"temperature", GeneType::real, plain.temperature, 0.25, 4, {}, "attention logits divided by t"},
      {"first_layer", GeneType::integer, std::nullopt, 0, kMaxLayer, {}, "first layer with the temperature"},
      {"last_layer", GeneType::integer, std::nullopt, 0, kMaxLayer, {}, "last layer with the temperature"},
  };
}

}  // namespace

json temperature_to_json(const AttentionTemperature& t) {
  return {{"temperature", t.temperature}, {"layers", t.layers}};
}

AttentionTemperature temperature_from_json(const json& m) {
  check::reject_unknown(m, "attention_temperature", {"temperature", "layers"});
  AttentionTemperature t;
  t.temperature = check::number(m, "attention_temperature.temperature", t.temperature);
  t.layers = check::layer_list(m, "attention_temperature.layers");
  return t;
}

void validate_temperature(const AttentionTemperature& t, const ModelShape& model) {
  check::check_scale(t.temperature, "attention_temperature.temperature");
  check::check_layer_list(t.layers, "attention_temperature.layers", model);
}

AttentionTemperature temperature_from_genes(const GeneValues& genes) {
  AttentionTemperature t;
  t.temperature = genes.number("temperature");
  t.layers = check::gene_layer_range(genes);
  return t;
}

const MethodModule& temperature_method() {
  static const MethodModule module = [] {
    MethodModule m = optional_field_method<AttentionTemperature>(
        "temperature", "attention_temperature", Mechanism::layer_score_scales, &Intervention::attention_temperature,
        genes(), {{"first_layer", "last_layer"}},
        {temperature_to_json, temperature_from_json, validate_temperature, temperature_from_genes},
        AttentionTemperature{.temperature = 1.0, .layers = {0}});
    m.paper_gives_setting = false;  // t = 1, the neutral value, is the plain model
    return m;
  }();
  return module;
}

}  // namespace midtune
