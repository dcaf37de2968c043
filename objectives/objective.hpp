// The Objective interface (docs/design.md "Data flow"): a method's genome space
// (with its starting genome), the pure decode genome -> Intervention, and the
// fitness of per-position scores. Objectives never see a model. A method's
// facts live in its module (methods/<method>.hpp, listed by
// methods/registry.hpp); make_objective() picks the objective.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/intervention.hpp"
#include "core/experiment/experiment.hpp"  // ObjectiveConfig
#include "core/ga/genome.hpp"
#include "objectives/metrics.hpp"

namespace midtune {

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  // The genes the strategy searches; space().seed() is the initial genome.
  virtual const GenomeSpace& space() const = 0;
  Genome initial_genome() const;
  // Pure: the same genome always gives the same Intervention.
  virtual Intervention decode(const Genome& genome) const = 0;
  virtual double fitness(const std::vector<metrics::PositionAccuracy>& by_position) const = 0;
  // The method as its paper sets it (every gene at docs/methods.md's value, genes
  // the paper leaves open at the experiment's start value), compared on the
  // held-out split; nullopt when the paper's knobs are the search itself
  // (LPES, PI).
  virtual std::optional<Intervention> paper_default() const { return std::nullopt; }
};

// The experiment's (validated) `objective` section for a model with `layers`
// layers. Throws std::invalid_argument naming the field (objective.kind,
// objective.lpes.degree, ...) and the reason.
std::unique_ptr<Objective> make_objective(const ObjectiveConfig& objective, int layers);

// The bespoke genomes (lpes_objective.cpp, pi_objective.cpp); the gene-table
// methods go through make_gene_table_objective (gene_table.hpp).
std::unique_ptr<Objective> make_lpes_objective(const ObjectiveConfig& objective, int layers);
std::unique_ptr<Objective> make_pi_objective(const ObjectiveConfig& objective);
std::unique_ptr<Objective> make_combo_objective(const ObjectiveConfig& objective, int layers);

}  // namespace midtune
