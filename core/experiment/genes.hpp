// Searchable knobs of the methods that have no bespoke section in the
// experiment file (mspoe, siw, caliope, phs): each method declares its genes
// here (name, type, hard bounds, paper default), and the file sets each
// gene's search range under `objective.<method>.genes`, starting from the
// paper default. A method added later only adds a table to genes.cpp.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace midtune {

// A gene value: numbers for integer/real genes, text for categorical ones.
using GeneValue = std::variant<double, std::string>;
nlohmann::json gene_value_to_json(const GeneValue& value);  // integral numbers as integers
nlohmann::json gene_number_to_json(double number);
std::string gene_value_to_string(const GeneValue& value);

enum class GeneType { integer, real, categorical };
const char* to_string(GeneType type);

// What a method declares about one of its genes.
struct GeneSchema {
  std::string name;
  GeneType type = GeneType::real;
  // The paper's value; nullopt when the paper gives none and the layer range
  // depends on the model, so the experiment must set it.
  std::optional<GeneValue> paper_default;
  // Hard bounds for integer/real genes (inclusive).
  double lower = -std::numeric_limits<double>::infinity();
  double upper = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // categorical: the allowed values
  std::string meaning;               // one line, for messages and docs
};

// One gene as the experiment sets it: either a stepped interval
// [min, max] by step, or a list of values (categorical genes always list;
// numeric genes may list values instead of an interval). A gene the file
// does not mention is fixed at its paper default (values = {default}).
struct GeneRange {
  std::string name;
  GeneType type = GeneType::real;
  bool listed = false;  // true: `values`; false: min/max/step
  double min = 0.0;
  double max = 0.0;
  double step = 0.0;
  std::vector<GeneValue> values;
  GeneValue start;  // where a search starts (the paper default unless set)
  // Only one possible value: not searched.
  bool fixed() const { return listed ? values.size() == 1 : min == max; }
  nlohmann::json to_json() const;
  bool operator==(const GeneRange&) const = default;
};

// The genes of one method, in schema order.
struct MethodGenes {
  std::string method;
  std::vector<GeneRange> genes;
  // Throws std::out_of_range naming the gene when it does not exist.
  const GeneRange& gene(const std::string& name) const;
  nlohmann::json to_json() const;
  bool operator==(const MethodGenes&) const = default;
};

// Two genes of a method whose values must be ordered: lower <= upper
// (e.g. mspoe min_ratio <= max_ratio, siw first_layer <= last_layer).
struct GeneOrder {
  std::string lower;
  std::string upper;
};

// Methods with a gene table: mspoe, siw, caliope, phs.
const std::vector<std::string>& gene_methods();
// The schema of `method`'s genes; throws std::out_of_range for another method.
const std::vector<GeneSchema>& method_gene_schema(const std::string& method);
const std::vector<GeneOrder>& method_gene_orders(const std::string& method);

}  // namespace midtune
