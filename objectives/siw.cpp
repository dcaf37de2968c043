// SIW as a searchable objective (METHODS.md "SIW"): genes alpha_dense,
// alpha_sparse, sigma and the layer range [first_layer, last_layer]; the
// paper gives no values, so this is the "SIW alpha tuning" search.
#include "objectives/gene_table.hpp"

namespace midtune {

void apply_siw_genes(const GeneValues& genes, Intervention& out) {
  Siw s;
  s.alpha_dense = genes.number("alpha_dense");
  s.alpha_sparse = genes.number("alpha_sparse");
  s.sigma = genes.number("sigma");
  for (int l = genes.integer("first_layer"); l <= genes.integer("last_layer"); ++l) s.layers.push_back(l);
  out.siw = s;
}

std::unique_ptr<Objective> make_siw_objective(const ObjectiveConfig& objective, int layers) {
  return make_gene_table_objective(objective, "siw", layers, apply_siw_genes);
}

}  // namespace midtune
