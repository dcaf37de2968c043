// CALIOPE as a searchable objective (METHODS.md "CALIOPE"): the calibrator
// kind as a categorical gene plus its gap parameters (eq. 3-5). Parameters
// of the other calibrators are carried but unused by the engine.
#include "objectives/gene_table.hpp"

namespace midtune {

void apply_caliope_genes(const GeneValues& genes, Intervention& out) {
  PositionMap p;
  p.kind = genes.text("calibrator");
  p.gap = genes.number("gap");
  p.delta_min = genes.number("delta_min");
  p.delta_max = genes.number("delta_max");
  p.delta0 = genes.number("delta0");
  p.lambda = genes.number("lambda");
  out.position_map = p;
}

std::unique_ptr<Objective> make_caliope_objective(const ObjectiveConfig& objective, int layers) {
  return make_gene_table_objective(objective, "caliope", layers, apply_caliope_genes);
}

}  // namespace midtune
