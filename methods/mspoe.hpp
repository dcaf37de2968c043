// Ms-PoE (docs/methods.md "Ms-PoE"): per-head RoPE ratios assigned at prefill.
// This module holds everything about Ms-PoE that is not model math: its
// parameters, genes and paper defaults, JSON, validation against the model,
// decoding gene values. The ratio assignment itself runs in the engine
// (backends/engine/hooks/mspoe_order.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune {

struct MethodModule;

// The member initialisers are the paper's values (Ms-PoE sec. 4: ratios
// 1.2-1.8, alpha 3, from layer 2); the gene table's paper defaults read them.
struct MsPoe {
  double min_ratio = 1.2;
  double max_ratio = 1.8;
  int first_layer = 2;
  double alpha = 3.0;
  // awareness (paper's rank, default) | reference-argsort | sequential | random | entropy
  std::string order = "awareness";
  // The paper spaces ratios min + (i-1)(max-min)/(H-1); the reference code
  // uses min + (max-min)k/H. false = paper.
  bool reference_spacing = false;
  std::uint64_t seed = 0;  // for order == random
  bool operator==(const MsPoe&) const = default;
};

// The head orders the engine implements, the paper's first.
const std::vector<std::string>& mspoe_orders();
// "awareness, reference-argsort, ..." for messages.
std::string mspoe_order_list();

nlohmann::json mspoe_to_json(const MsPoe& mspoe);
// Model-free checks; throws std::invalid_argument "intervention.mspoe.<field>: ...".
MsPoe mspoe_from_json(const nlohmann::json& j);
// Ratios finite and > 0, min <= max, alpha >= 0, a known order, first_layer in the model.
void validate_mspoe(const MsPoe& mspoe, const ModelShape& model);
MsPoe mspoe_from_genes(const GeneValues& genes);

const MethodModule& mspoe_method();

}  // namespace midtune
