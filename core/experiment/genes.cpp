#include "core/experiment/genes.hpp"

#include <stdexcept>

namespace midtune {

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

}  // namespace midtune
