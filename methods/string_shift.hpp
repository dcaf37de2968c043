// STRING, ShifTed RotRay position embeddING (docs/methods.md "STRING"; An
// et al. 2024, "Why Does the Effective Context Length of LLMs Fall
// Short?", sec. 4): the relative positions a model saw least in training,
// the largest, are overwritten by well-trained smaller ones. In the chosen
// layers a key at distance d >= S from the query is seen at distance
// d - S + W; nearer keys keep theirs. S (the shift) is about a third of
// the trained length in the paper, W (the local window) 128.
// This module holds its parameters, genes, JSON and validation; the engine
// applies it as a DistanceRemap (backends/engine/model.hpp).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune {

struct MethodModule;

// shift == window is the plain model (d - S + W = d).
struct StringShift {
  int shift = 0;     // S: distances from S on are moved down (required: no portable default)
  int window = 128;  // W: where the moved distances start
  std::vector<int> layers;
  bool operator==(const StringShift&) const = default;
};

nlohmann::json string_shift_to_json(const StringShift& setting);
// Throws std::invalid_argument "intervention.string_shift.<field>: ..."
// (shift must be given).
StringShift string_shift_from_json(const nlohmann::json& j);
// 1 <= W <= S, a non-empty list of the model's layers.
void validate_string_shift(const StringShift& setting, const ModelShape& model);
StringShift string_shift_from_genes(const GeneValues& genes);
// The far query moved back by S - W: a far distance d is seen as d - S + W.
int string_query_shift(const StringShift& setting);

const MethodModule& string_shift_method();

}  // namespace midtune
