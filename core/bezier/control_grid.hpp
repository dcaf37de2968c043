// The discretised control-point space of LPES (paper 000, Appendix B,
// Table 9): x on a grid of step 1 in [0, L-1], y on a grid of step 0.1 in
// [1, 2]. Both steps and the y range are configurable.
#pragma once

#include <nlohmann/json.hpp>

namespace midtune::bezier {

struct ControlGrid {
  int layers = 32;        // L: x ranges over [0, L-1]
  double x_step = 1.0;
  double y_min = 1.0;
  double y_max = 2.0;
  double y_step = 0.1;
  double initial_y = 1.5;  // y of every point of the LPES eq. 8 individual

  // Throws std::invalid_argument naming the field and the reason.
  void validate() const;
  // Number of grid values along x and y.
  int x_count() const;
  int y_count() const;
  bool operator==(const ControlGrid&) const = default;
};

void to_json(nlohmann::json& out, const ControlGrid& grid);
// Missing fields keep their defaults; unknown fields are an error.
void from_json(const nlohmann::json& in, ControlGrid& grid);

}  // namespace midtune::bezier
