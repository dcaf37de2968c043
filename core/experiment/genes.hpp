// Searchable knobs of the methods that have no bespoke section in the
// experiment file (mspoe, siw, caliope, phs): each method declares its genes
// in its module (methods/<method>.cpp: name, type, hard bounds, paper
// default; listed by methods/registry.hpp), and the file sets each gene's
// search range under `objective.<method>.genes`, starting from the paper
// default.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"  // GeneSchema, GeneValue, GeneType

namespace midtune {

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

}  // namespace midtune
