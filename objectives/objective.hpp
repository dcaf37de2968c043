// The Objective interface (DESIGN.md "Data flow"): a method's genome space,
// its starting genome, the pure decode genome -> Intervention, and the
// fitness of per-position scores. Objectives never see a model. One method,
// one file: lpes.cpp, pi.cpp; make_objective() picks one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/intervention.hpp"
#include "core/ga/strategy.hpp"

namespace midtune {

// LPES fitness weights (LPES eq. 11: λ_B·acc_B + λ_M·acc_M + λ_E·acc_E).
struct FitnessWeights {
  double beginning = 0.2;
  double middle = 0.3;
  double end = 0.5;
};

// Accuracy per listed gold position, in the experiment's order.
struct PositionAccuracy {
  double position = 0.0;
  double accuracy = 0.0;
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  // Names of the genes, in genome order (for reports).
  virtual std::vector<std::string> gene_names() const = 0;
  virtual Genome initial_genome() const = 0;
  // Pure: the same genome always gives the same Intervention.
  virtual Intervention decode(const Genome& genome) const = 0;
  virtual double fitness(const std::vector<PositionAccuracy>& scores) const = 0;
};

}  // namespace midtune
