#include "objectives/objective.hpp"

#include <stdexcept>

namespace midtune {

Genome Objective::initial_genome() const {
  if (!space().seed()) throw std::logic_error(name() + ": the genome space has no initial genome");
  return *space().seed();
}

std::unique_ptr<Objective> make_objective(const ObjectiveConfig& objective, int layers) {
  const std::string& kind = objective.kind;
  if (kind == "lpes") return make_lpes_objective(objective, layers);
  if (kind == "pi") return make_pi_objective(objective);
  if (kind == "mspoe") return make_mspoe_objective(objective, layers);
  if (kind == "siw") return make_siw_objective(objective, layers);
  if (kind == "caliope") return make_caliope_objective(objective, layers);
  if (kind == "phs") return make_phs_objective(objective, layers);
  if (kind == "combo") return make_combo_objective(objective, layers);
  throw std::invalid_argument("objective.kind: '" + kind +
                              "' has no search objective in this build (available: lpes, pi, mspoe, siw, caliope, phs, combo)");
}

}  // namespace midtune
