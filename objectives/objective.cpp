#include "objectives/objective.hpp"

#include <stdexcept>

#include "objectives/gene_table.hpp"

namespace midtune {

Genome Objective::initial_genome() const {
  if (!space().seed()) throw std::logic_error(name() + ": the genome space has no initial genome");
  return *space().seed();
}

std::unique_ptr<Objective> make_objective(const ObjectiveConfig& objective, int layers) {
  const std::string& kind = objective.kind;
  if (kind == "combo") return make_combo_objective(objective, layers);
  const MethodModule* method = find_method(kind);
  if (method != nullptr && method->has_gene_table()) return make_gene_table_objective(objective, kind, layers);
  // The bespoke genomes: LPES's Bézier curve, PI's single scale.
  if (kind == "lpes") return make_lpes_objective(objective, layers);
  if (kind == "pi") return make_pi_objective(objective);
  std::string available;
  for (const std::string& name : method_names()) available += name + ", ";
  throw std::invalid_argument("objective.kind: '" + kind + "' has no search objective in this build (available: " +
                              available + "combo)");
}

}  // namespace midtune
