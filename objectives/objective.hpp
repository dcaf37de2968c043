// The Objective interface (DESIGN.md "Data flow"): a method's genome space
// (with its starting genome), the pure decode genome -> Intervention, and the
// fitness of per-position scores. Objectives never see a model. One method,
// one file: lpes.cpp, pi.cpp; make_objective() picks one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/intervention.hpp"
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
  // The method as its paper sets it (every gene at METHODS.md's value, genes
  // the paper leaves open at the experiment's start value), compared on the
  // held-out split; nullopt when the paper's knobs are the search itself
  // (LPES, PI).
  virtual std::optional<Intervention> paper_default() const { return std::nullopt; }
};

// The experiment's (validated) `objective` section for a model with `layers`
// layers. Throws std::invalid_argument naming the field (objective.kind,
// objective.lpes.degree, ...) and the reason.
std::unique_ptr<Objective> make_objective(const ObjectiveConfig& objective, int layers);

// Per-method constructors (one file each).
std::unique_ptr<Objective> make_lpes_objective(const ObjectiveConfig& objective, int layers);
std::unique_ptr<Objective> make_pi_objective(const ObjectiveConfig& objective);
// Issue 5 (gene tables of core/experiment/genes.hpp; objectives/gene_table.hpp).
std::unique_ptr<Objective> make_mspoe_objective(const ObjectiveConfig& objective, int layers);
std::unique_ptr<Objective> make_siw_objective(const ObjectiveConfig& objective, int layers);
std::unique_ptr<Objective> make_caliope_objective(const ObjectiveConfig& objective, int layers);
std::unique_ptr<Objective> make_phs_objective(const ObjectiveConfig& objective, int layers);
std::unique_ptr<Objective> make_combo_objective(const ObjectiveConfig& objective, int layers);

}  // namespace midtune
