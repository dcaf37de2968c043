// Ms-PoE as a searchable objective (METHODS.md "Ms-PoE"): genes min_ratio,
// max_ratio, alpha, first_layer, order; the engine assigns the ratios to
// heads at prefill (backends/engine/hooks/mspoe_order.hpp).
#include "objectives/gene_table.hpp"

namespace midtune {

void apply_mspoe_genes(const GeneValues& genes, Intervention& out) {
  MsPoe m;
  m.min_ratio = genes.number("min_ratio");
  m.max_ratio = genes.number("max_ratio");
  m.alpha = genes.number("alpha");
  m.first_layer = genes.integer("first_layer");
  m.order = genes.text("order");
  out.mspoe = m;
}

std::unique_ptr<Objective> make_mspoe_objective(const ObjectiveConfig& objective, int layers) {
  return make_gene_table_objective(objective, "mspoe", layers, apply_mspoe_genes);
}

}  // namespace midtune
