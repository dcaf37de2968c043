// SelfExtend (docs/methods.md "SelfExtend"; Jin et al. 2024, "LLM Maybe
// LongLM: Self-Extend LLM Context Window Without Tuning", eq. 4 and
// Alg. 1): in the chosen layers a key within `window` tokens of the query
// keeps its true relative position; a farther key is seen at grouped
// positions, the query at floor(i / G) + W - floor(W / G) and the key at
// floor(j / G), so far distances shrink about G-fold and stay continuous at
// the window's edge. The two attentions merge by distance, as one softmax.
// This module holds its parameters, genes, JSON and validation; the engine
// applies it as a DistanceRemap (backends/engine/model.hpp).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune {

struct MethodModule;

// group 1 is the plain model (every distance kept).
struct SelfExtend {
  int group = 4;     // G: far positions divided by G (floor)
  int window = 1024;  // W: the neighbour window, keys at distance < W keep theirs
  std::vector<int> layers;
  bool operator==(const SelfExtend&) const = default;
};

nlohmann::json self_extend_to_json(const SelfExtend& setting);
// Throws std::invalid_argument "intervention.self_extend.<field>: ...".
SelfExtend self_extend_from_json(const nlohmann::json& j);
// G in [1, 1024], W >= 1, a non-empty list of the model's layers.
void validate_self_extend(const SelfExtend& setting, const ModelShape& model);
SelfExtend self_extend_from_genes(const GeneValues& genes);
// Where the far query sits beyond floor(i / G): W - floor(W / G), so far
// distances meet the window's edge (LongLM Alg. 1).
int self_extend_query_shift(const SelfExtend& setting);

const MethodModule& self_extend_method();

}  // namespace midtune
