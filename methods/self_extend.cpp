#include "methods/self_extend.hpp"

#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

namespace check = method_checks;
using nlohmann::json;

constexpr int kMaxGroup = 1024;

// LongLM's README runs G 4, W 1024 (its advice for Llama-2: G 2 to 64, W
// 512 to 1536). The layer range depends on the model (the paper applies it
// to every layer).
std::vector<GeneSchema> genes() {
  const SelfExtend paper;
  constexpr double kMaxLayer = 1023;  // validate() checks the model's real layer count
  return {
      {"group", GeneType::integer, static_cast<double>(paper.group), 1, 64, {}, "far positions divided by G"},
      {"window",
       GeneType::integer,
       static_cast<double>(paper.window),
       16,
       8192,
       {},
       "keys nearer than W keep their positions"},
      {"first_layer", GeneType::integer, std::nullopt, 0, kMaxLayer, {}, "first layer with SelfExtend"},
      {"last_layer", GeneType::integer, std::nullopt, 0, kMaxLayer, {}, "last layer with SelfExtend"},
  };
}

}  // namespace

json self_extend_to_json(const SelfExtend& s) {
  return {{"group", s.group}, {"window", s.window}, {"layers", s.layers}};
}

SelfExtend self_extend_from_json(const json& m) {
  check::reject_unknown(m, "self_extend", {"group", "window", "layers"});
  SelfExtend s;
  s.group = check::token_count(m, "self_extend.group", s.group);
  s.window = check::token_count(m, "self_extend.window", s.window);
  s.layers = check::layer_list(m, "self_extend.layers");
  return s;
}

void validate_self_extend(const SelfExtend& s, const ModelShape& model) {
  check::check_at_least(s.window, 1, "self_extend.window");
  check::check_at_least(s.group, 1, "self_extend.group");
  if (s.group > kMaxGroup) {
    throw check::InvalidValue("intervention.self_extend.group: must be <= " + std::to_string(kMaxGroup));
  }
  check::check_layer_list(s.layers, "self_extend.layers", model);
}

SelfExtend self_extend_from_genes(const GeneValues& genes) {
  SelfExtend s;
  s.group = genes.integer("group");
  s.window = genes.integer("window");
  s.layers = check::gene_layer_range(genes);
  return s;
}

int self_extend_query_shift(const SelfExtend& s) { return s.window - s.window / s.group; }

const MethodModule& self_extend_method() {
  static const MethodModule module = optional_field_method<SelfExtend>(
      "selfextend", "self_extend", Mechanism::distance_remap, &Intervention::self_extend, genes(),
      {{"first_layer", "last_layer"}},
      {self_extend_to_json, self_extend_from_json, validate_self_extend, self_extend_from_genes},
      SelfExtend{.group = 2, .window = 4, .layers = {0}});
  return module;
}

}  // namespace midtune
