#include "methods/string_shift.hpp"

#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

namespace check = method_checks;
using nlohmann::json;

// The paper's W is 128; its S, a third of the trained length, depends on
// the model (Qwen2.5's 32k: about 10,900) and does nothing on a shorter
// prompt, so an experiment sets S for its prompts, as the layer range
// (the paper applies it to every layer).
std::vector<GeneSchema> genes() {
  const StringShift paper;
  constexpr double kMaxLayer = 1023;  // validate() checks the model's real layer count
  return {
      {"window", GeneType::integer, static_cast<double>(paper.window), 8, 2048, {}, "moved distances start at W"},
      {"shift", GeneType::integer, std::nullopt, 16, 65536, {}, "distances from S on are moved down by S - W"},
      {"first_layer", GeneType::integer, std::nullopt, 0, kMaxLayer, {}, "first layer with STRING"},
      {"last_layer", GeneType::integer, std::nullopt, 0, kMaxLayer, {}, "last layer with STRING"},
  };
}

}  // namespace

json string_shift_to_json(const StringShift& s) {
  return {{"shift", s.shift}, {"window", s.window}, {"layers", s.layers}};
}

StringShift string_shift_from_json(const json& m) {
  check::reject_unknown(m, "string_shift", {"shift", "window", "layers"});
  StringShift s;
  if (!m.contains("shift")) {
    check::bad("string_shift.shift", "must be given (the paper: a third of the model's trained length)");
  }
  s.shift = check::token_count(m, "string_shift.shift", s.shift);
  s.window = check::token_count(m, "string_shift.window", s.window);
  s.layers = check::layer_list(m, "string_shift.layers");
  return s;
}

void validate_string_shift(const StringShift& s, const ModelShape& model) {
  check::check_at_least(s.window, 1, "string_shift.window");
  if (s.shift < s.window) {
    throw check::InvalidValue("intervention.string_shift.shift: " + std::to_string(s.shift) + " is below the window " +
                              std::to_string(s.window) + " (distances would move up, not down)");
  }
  check::check_layer_list(s.layers, "string_shift.layers", model);
}

StringShift string_shift_from_genes(const GeneValues& genes) {
  StringShift s;
  s.shift = genes.integer("shift");
  s.window = genes.integer("window");
  s.layers = check::gene_layer_range(genes);
  return s;
}

int string_query_shift(const StringShift& s) { return s.window - s.shift; }

const MethodModule& string_shift_method() {
  static const MethodModule module = optional_field_method<StringShift>(
      "string", "string_shift", Mechanism::distance_remap, &Intervention::string_shift, genes(),
      {{"first_layer", "last_layer"}, {"window", "shift"}},
      {string_shift_to_json, string_shift_from_json, validate_string_shift, string_shift_from_genes},
      StringShift{.shift = 8, .window = 4, .layers = {0}});
  return module;
}

}  // namespace midtune
