// CALIOPE (docs/methods.md "CALIOPE"): position ids remapped chunk by chunk,
// Phi(t) = t + c(m(t)) with a calibrator c (eqs. 2-5). This module holds
// everything about CALIOPE that is not model math: its parameters (the
// Intervention's `position_map`), genes and paper defaults, JSON, validation,
// decoding gene values. The positions themselves are computed in the engine
// (backends/engine/hooks/position_map.hpp).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune {

struct MethodModule;

// The member initialisers are the paper's values: Moses gap 10000, hourglass
// 5..1000, decay 1000 * 0.95^k; the gene table's paper defaults read them.
struct PositionMap {
  std::string kind;  // moses | hourglass | decay
  double gap = 10000.0;        // moses: Delta_gap
  double delta_min = 5.0;      // hourglass
  double delta_max = 1000.0;   // hourglass
  double delta0 = 1000.0;      // decay
  double lambda = 0.95;        // decay
  bool operator==(const PositionMap&) const = default;
};

// The calibrators, the paper's first choice (Moses) first.
const std::vector<std::string>& caliope_calibrators();

// Only the kind's own parameters are written.
nlohmann::json position_map_to_json(const PositionMap& map);
// Throws std::invalid_argument "intervention.position_map.<field>: ...".
PositionMap position_map_from_json(const nlohmann::json& j);
// A known kind and finite parameters that keep Phi strictly increasing for
// every chunk count (every step c(m+1) - c(m) must exceed -1; the paper's
// constraint). No model-dependent part.
void validate_position_map(const PositionMap& map, const ModelShape& model);
PositionMap position_map_from_genes(const GeneValues& genes);

const MethodModule& caliope_method();

}  // namespace midtune
