// The vocabulary every method module speaks (methods/<method>.hpp): gene
// schemas and values, the model's shape for validation. It sits at the bottom
// with the Intervention contract and depends only on the standard library and
// nlohmann/json, so backends, the experiment loader and the objectives can
// all read a method's facts from its one module.
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

// Two genes of a method whose values must be ordered: lower <= upper
// (e.g. mspoe min_ratio <= max_ratio, siw first_layer <= last_layer).
struct GeneOrder {
  std::string lower;
  std::string upper;
};

// The value of every gene of one method for one genome.
class GeneValues {
 public:
  explicit GeneValues(std::string method) : method_(std::move(method)) {}
  void set(const std::string& name, GeneValue value) { values_[name] = std::move(value); }
  // Throws std::logic_error naming the method and gene when absent or of the other type.
  double number(const std::string& name) const;
  int integer(const std::string& name) const;
  const std::string& text(const std::string& name) const;

 private:
  const GeneValue& at(const std::string& name) const;
  std::string method_;
  std::map<std::string, GeneValue> values_;
};

// What validation needs to know of a model.
struct ModelShape {
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int hidden = 0;
};

}  // namespace midtune
