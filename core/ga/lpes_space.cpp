#include "core/ga/lpes_space.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace midtune {
namespace {

using bezier::CurveKind;

FloatGene y_gene(const std::string& name, const bezier::ControlGrid& grid) {
  return FloatGene{name, grid.y_min, grid.y_max, grid.y_step};
}

Gene x_gene(const std::string& name, const bezier::ControlGrid& grid) {
  if (grid.x_step == 1.0) return IntGene{name, 0, grid.layers - 1};
  return FloatGene{name, 0.0, grid.layers - 1.0, grid.x_step};
}

// Gene names x0, y0, s12, ... (appending avoids GCC 12's false -Wrestrict
// on "x" + std::to_string(k)).
std::string indexed(const char* prefix, int index) {
  std::string name(prefix);
  name += std::to_string(index);
  return name;
}

}  // namespace

void LpesSpec::validate() const {
  grid.validate();
  if (curve == CurveKind::brute_force) return;
  if (degree < bezier::kMinDegree || degree > bezier::kMaxDegree) {
    throw std::invalid_argument("lpes: degree = " + std::to_string(degree) +
                                " must be in 1..6 (2..7 control points)");
  }
  if (grid.x_count() < degree + 1) {
    throw std::invalid_argument("lpes: degree " + std::to_string(degree) + " needs " +
                                std::to_string(degree + 1) + " distinct x values, the grid has " +
                                std::to_string(grid.x_count()) + " (layers " +
                                std::to_string(grid.layers) + ", x_step " +
                                std::to_string(grid.x_step) + ")");
  }
}

void to_json(nlohmann::json& out, const LpesSpec& spec) {
  out = {{"curve", bezier::to_string(spec.curve)}, {"degree", spec.degree}, {"grid", spec.grid}};
}

void from_json(const nlohmann::json& in, LpesSpec& spec) {
  if (!in.is_object()) throw std::invalid_argument("lpes: expected an object");
  for (const auto& [key, value] : in.items()) {
    if (key == "curve") {
      if (!value.is_string()) throw std::invalid_argument("lpes: curve must be a string");
      spec.curve = bezier::curve_kind_from_string(value.get<std::string>());
    } else if (key == "degree") {
      if (!value.is_number_integer()) throw std::invalid_argument("lpes: degree must be an integer");
      spec.degree = value.get<int>();
    } else if (key == "grid") {
      spec.grid = value.get<bezier::ControlGrid>();
    } else {
      throw std::invalid_argument("lpes: '" + key + "' is not a field (expected curve, degree, grid)");
    }
  }
  spec.validate();
}

Genome lpes_initial_genome(const LpesSpec& spec) { return *lpes_genome_space(spec).seed(); }

GenomeSpace lpes_genome_space(const LpesSpec& spec) {
  spec.validate();
  std::vector<Gene> genes;
  if (spec.curve == CurveKind::brute_force) {
    for (int h = 0; h < spec.grid.layers; ++h) genes.push_back(y_gene(indexed("s", h), spec.grid));
    GenomeSpace space(std::move(genes));
    Genome seed(space.size());
    for (std::size_t h = 0; h < seed.size(); ++h) seed[h] = snap(space.gene(h), spec.grid.initial_y);
    space.set_seed(std::move(seed));
    return space;
  }
  for (int k = 0; k <= spec.degree; ++k) {
    genes.push_back(x_gene(indexed("x", k), spec.grid));
    genes.push_back(y_gene(indexed("y", k), spec.grid));
  }
  GenomeSpace space(
      std::move(genes),
      [](const Genome& genome) { return bezier::strictly_increasing_x(control_points_of(genome)); },
      "control point x strictly increasing, x0 < x1 < ... (LPES eq. 10)");
  space.set_control_points(ControlPointLayout{spec.degree});
  Genome seed(space.size());
  for (int k = 0; k <= spec.degree; ++k) {  // LPES eq. 8: (k(L-1)/D, 1.5)
    const double x = static_cast<double>(k) * (spec.grid.layers - 1) / spec.degree;
    seed[2 * k] = snap(space.gene(2 * k), x);
    seed[2 * k + 1] = snap(space.gene(2 * k + 1), spec.grid.initial_y);
  }
  space.set_seed(std::move(seed));
  return space;
}

std::vector<bezier::ControlPoint> control_points_of(const Genome& genome) {
  if (genome.size() < 4 || genome.size() % 2 != 0) {
    throw std::invalid_argument("control points: genome of " + std::to_string(genome.size()) +
                                " values is not (x0, y0, ..., xD, yD) with D >= 1");
  }
  std::vector<bezier::ControlPoint> points(genome.size() / 2);
  for (std::size_t k = 0; k < points.size(); ++k) points[k] = {genome[2 * k], genome[2 * k + 1]};
  return points;
}

std::vector<double> lpes_layer_scales(const LpesSpec& spec, const Genome& genome) {
  if (spec.curve == CurveKind::brute_force) {
    if (genome.size() != static_cast<std::size_t>(spec.grid.layers)) {
      throw std::invalid_argument("lpes brute_force: genome has " + std::to_string(genome.size()) +
                                  " scales for " + std::to_string(spec.grid.layers) + " layers");
    }
    return genome;
  }
  if (genome.size() != 2 * static_cast<std::size_t>(spec.degree + 1)) {
    throw std::invalid_argument("lpes: genome has " + std::to_string(genome.size()) +
                                " values, degree " + std::to_string(spec.degree) + " needs " +
                                std::to_string(2 * (spec.degree + 1)));
  }
  return bezier::sample_layer_scales(spec.curve, control_points_of(genome), spec.grid.layers);
}

}  // namespace midtune
