// The LPES objective (docs/methods.md "LPES", paper 000; the method's module is
// methods/lpes.hpp): the genome is the D + 1 Bézier control points on the
// ControlGrid; decode samples one RoPE scale per layer (LPES eqs. 5-6) and
// every head of layer h uses s_h.
#include <stdexcept>

#include "core/ga/lpes_space.hpp"
#include "methods/lpes.hpp"
#include "objectives/objective.hpp"

namespace midtune {
namespace {

class LpesObjective final : public Objective {
 public:
  LpesObjective(LpesSpec spec, const FitnessWeights& weights)
      : spec_(spec), space_(lpes_genome_space(spec)), weights_{weights.beginning, weights.middle, weights.end} {}

  std::string name() const override { return "lpes"; }
  const GenomeSpace& space() const override { return space_; }
  Intervention decode(const Genome& genome) const override {
    space_.require_valid(genome, "lpes genome");
    Intervention intervention;
    intervention.rope_scale = rope_scale_per_layer(lpes_layer_scales(spec_, genome));
    return intervention;
  }
  // LPES fitness: λ_B·acc(beginning) + λ_M·acc(middle) + λ_E·acc(end).
  double fitness(const std::vector<metrics::PositionAccuracy>& by_position) const override {
    return metrics::bucket_fitness(by_position, weights_);
  }

 private:
  LpesSpec spec_;
  GenomeSpace space_;
  metrics::BucketWeights weights_;
};

}  // namespace

std::unique_ptr<Objective> make_lpes_objective(const ObjectiveConfig& objective, int layers) {
  const LpesConfig& c = objective.lpes;
  LpesSpec spec;
  try {
    spec.curve = bezier::curve_kind_from_string(c.curve == "brute-force" ? "brute_force" : c.curve);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("objective.lpes.curve: ") + e.what());
  }
  spec.degree = c.degree;
  spec.grid.layers = layers;
  spec.grid.x_step = c.x_step;
  spec.grid.y_min = c.y_min;
  spec.grid.y_max = c.y_max;
  spec.grid.y_step = c.y_step;
  // The eq. 8 individual: every y at 1.5 in the paper's [1, 2], i.e. mid-range.
  spec.grid.initial_y = 0.5 * (c.y_min + c.y_max);
  try {
    spec.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("objective.lpes: ") + e.what());
  }
  return std::make_unique<LpesObjective>(spec, objective.weights);
}

}  // namespace midtune
