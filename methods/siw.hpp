// SIW (docs/methods.md "SIW"): scale post-softmax attention to the initial token,
// by alpha_dense in dense chunks and alpha_sparse elsewhere. This module holds
// everything about SIW that is not model math: its parameters, genes, JSON,
// validation against the model, decoding gene values. The density test and
// the weights run in the engine (backends/engine/hooks/siw_density.hpp).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune {

struct MethodModule;

// The paper gives no alpha or sigma; 1 is the plain model.
struct Siw {
  double alpha_dense = 1.0;
  double alpha_sparse = 1.0;
  double sigma = 1.0;
  std::vector<int> layers;  // layer indices where SIW applies
  bool operator==(const Siw&) const = default;
};

nlohmann::json siw_to_json(const Siw& siw);
// Throws std::invalid_argument "intervention.siw.<field>: ...".
Siw siw_from_json(const nlohmann::json& j);
// Alphas and sigma finite and >= 0, a non-empty list of the model's layers.
void validate_siw(const Siw& siw, const ModelShape& model);
// The layer range [first_layer, last_layer] becomes the layer list.
Siw siw_from_genes(const GeneValues& genes);

const MethodModule& siw_method();

}  // namespace midtune
