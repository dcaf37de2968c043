// PHS as a searchable objective (METHODS.md "PHS"): the channel (from the
// phs-search candidates), its scale and the layer range.
#include "objectives/gene_table.hpp"

namespace midtune {

void apply_phs_genes(const GeneValues& genes, Intervention& out) {
  HiddenChannel h;
  h.channel = genes.integer("channel");
  h.scale = genes.number("scale");
  for (int l = genes.integer("first_layer"); l <= genes.integer("last_layer"); ++l) h.layers.push_back(l);
  out.hidden_channel = h;
}

std::unique_ptr<Objective> make_phs_objective(const ObjectiveConfig& objective, int layers) {
  return make_gene_table_objective(objective, "phs", layers, apply_phs_genes);
}

}  // namespace midtune
