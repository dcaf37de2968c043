// The PI objective (the LPES paper's uniform baseline; the method's module is
// methods/pi.hpp): one gene, one RoPE scale applied to every layer and head.
#include <stdexcept>

#include "objectives/objective.hpp"
#include "methods/pi.hpp"

namespace midtune {
namespace {

class PiObjective final : public Objective {
 public:
  PiObjective(const FloatGene& gene, const FitnessWeights& weights) : space_({gene}), weights_{weights.beginning, weights.middle, weights.end} {
    space_.set_seed({snap(gene, 0.5 * (gene.lo + gene.hi))});
  }
  std::string name() const override { return "pi"; }
  const GenomeSpace& space() const override { return space_; }
  Intervention decode(const Genome& genome) const override {
    space_.require_valid(genome, "pi genome");
    Intervention intervention;
    intervention.rope_scale = uniform_rope_scale(genome.at(0));
    return intervention;
  }
  // LPES fitness: λ_B·acc(beginning) + λ_M·acc(middle) + λ_E·acc(end).
  double fitness(const std::vector<metrics::PositionAccuracy>& by_position) const override {
    return metrics::bucket_fitness(by_position, weights_);
  }

 private:
  GenomeSpace space_;
  metrics::BucketWeights weights_;
};

}  // namespace

std::unique_ptr<Objective> make_pi_objective(const ObjectiveConfig& objective) {
  const FloatGene gene{"scale", objective.pi.min, objective.pi.max, objective.pi.step};
  if (!(gene.lo > 0.0)) throw std::invalid_argument("objective.pi.min: must be > 0 (a RoPE scale)");
  try {
    validate_gene(gene);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("objective.pi: ") + e.what());
  }
  return std::make_unique<PiObjective>(gene, objective.weights);
}

}  // namespace midtune
