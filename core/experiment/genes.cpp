#include "core/experiment/genes.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>

namespace midtune {
namespace {

constexpr double kMaxLayer = 1023;  // the backend checks the model's real layer count

GeneSchema real(std::string name, std::optional<double> paper, double lower, double upper,
                std::string meaning) {
  GeneSchema schema{std::move(name), GeneType::real, std::nullopt, lower, upper, {},
                    std::move(meaning)};
  if (paper) schema.paper_default = *paper;
  return schema;
}

GeneSchema layer(std::string name, std::optional<double> paper, std::string meaning) {
  GeneSchema schema = real(std::move(name), paper, 0, kMaxLayer, std::move(meaning));
  schema.type = GeneType::integer;
  return schema;
}

GeneSchema categorical(std::string name, std::string paper, std::vector<std::string> choices,
                       std::string meaning) {
  return GeneSchema{std::move(name), GeneType::categorical, GeneValue(std::move(paper)), 0, 0,
                    std::move(choices), std::move(meaning)};
}

// Defaults from METHODS.md: Ms-PoE 1.2-1.8, alpha 3, first layer 2; CALIOPE
// Moses gap 10000, hourglass 5..1000, decay 1000 * 0.95^k; PHS layers 10-25
// (32-layer models) and factor 0. SIW's paper gives no alpha/sigma: 1 is the
// plain model. SIW's layer range and PHS's channel have no portable default.
const std::map<std::string, std::vector<GeneSchema>>& schemas() {
  static const std::map<std::string, std::vector<GeneSchema>> table = {
      {"mspoe",
       {real("min_ratio", 1.2, 0.1, 8, "smallest per-head RoPE ratio"),
        real("max_ratio", 1.8, 0.1, 8, "largest per-head RoPE ratio"),
        real("alpha", 3.0, 0, 100, "position-awareness threshold (x row mean)"),
        layer("first_layer", 2, "first layer with per-head ratios"),
        categorical("order", "awareness",
                    {"awareness", "reference-argsort", "sequential", "random", "entropy"},
                    "how heads are ranked to ratios")}},
      {"siw",
       {real("alpha_dense", 1.0, 0, 10, "initial-token weight factor in dense areas"),
        real("alpha_sparse", 1.0, 0, 10, "initial-token weight factor elsewhere"),
        real("sigma", 1.0, 0, 100, "dense chunk threshold (x mean count)"),
        layer("first_layer", std::nullopt, "first layer with SIW"),
        layer("last_layer", std::nullopt, "last layer with SIW")}},
      {"caliope",
       {categorical("calibrator", "moses", {"moses", "hourglass", "decay"}, "calibrator kind"),
        real("gap", 10000, 0, 1e6, "Moses: Delta_gap"),
        real("delta_min", 5, 0, 1e6, "hourglass: Delta_min"),
        real("delta_max", 1000, 0, 1e6, "hourglass: Delta_max"),
        real("delta0", 1000, 0, 1e6, "decay: Delta_0"),
        real("lambda", 0.95, 0, 1, "decay: lambda")}},
      {"phs",
       {layer("channel", std::nullopt, "hidden-state channel (from phs-search)"),
        real("scale", 0.0, -10, 10, "factor applied to the channel"),
        layer("first_layer", 10, "first layer scaled"),
        layer("last_layer", 25, "last layer scaled")}},
  };
  return table;
}

const std::map<std::string, std::vector<GeneOrder>>& orders() {
  static const std::map<std::string, std::vector<GeneOrder>> table = {
      {"mspoe", {{"min_ratio", "max_ratio"}}},
      {"siw", {{"first_layer", "last_layer"}}},
      {"caliope", {{"delta_min", "delta_max"}}},
      {"phs", {{"first_layer", "last_layer"}}},
  };
  return table;
}

}  // namespace

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

const char* to_string(GeneType type) {
  switch (type) {
    case GeneType::integer: return "integer";
    case GeneType::real: return "real";
    case GeneType::categorical: return "categorical";
  }
  return "?";
}

nlohmann::json GeneRange::to_json() const {
  // The same keys the file uses, so to_json() loads back as an experiment.
  nlohmann::json j;
  if (listed) {
    j["values"] = nlohmann::json::array();
    for (const auto& value : values) j["values"].push_back(gene_value_to_json(value));
  } else {
    j["min"] = gene_number_to_json(min);
    j["max"] = gene_number_to_json(max);
    j["step"] = gene_number_to_json(step);
  }
  j["start"] = gene_value_to_json(start);
  return j;
}

const GeneRange& MethodGenes::gene(const std::string& name) const {
  for (const auto& range : genes) {
    if (range.name == name) return range;
  }
  throw std::out_of_range(method + " has no gene '" + name + "'");
}

nlohmann::json MethodGenes::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& range : genes) j[range.name] = range.to_json();
  return j;
}

const std::vector<std::string>& gene_methods() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> keys;
    for (const auto& [name, schema] : schemas()) keys.push_back(name);
    return keys;
  }();
  return names;
}

const std::vector<GeneSchema>& method_gene_schema(const std::string& method) {
  const auto found = schemas().find(method);
  if (found == schemas().end()) throw std::out_of_range("no gene table for method '" + method + "'");
  return found->second;
}

const std::vector<GeneOrder>& method_gene_orders(const std::string& method) {
  static const std::vector<GeneOrder> none;
  const auto found = orders().find(method);
  return found == orders().end() ? none : found->second;
}

}  // namespace midtune
