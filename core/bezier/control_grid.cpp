#include "core/bezier/control_grid.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace midtune::bezier {
namespace {

// Number of grid values lo, lo + step, ... not above hi (1e-9 slack so that
// 1.0 + 10 * 0.1 still counts 2.0).
int count_values(double lo, double hi, double step) {
  return static_cast<int>(std::floor((hi - lo) / step + 1e-9)) + 1;
}

[[noreturn]] void fail(const std::string& field, const std::string& reason) {
  throw std::invalid_argument("control grid: " + field + " " + reason);
}

}  // namespace

void ControlGrid::validate() const {
  if (layers < 1) fail("layers", "= " + std::to_string(layers) + ", must be >= 1");
  if (!(x_step > 0.0) || !std::isfinite(x_step)) fail("x_step", "must be > 0");
  if (!(y_step > 0.0) || !std::isfinite(y_step)) fail("y_step", "must be > 0");
  if (!std::isfinite(y_min) || !std::isfinite(y_max) || !(y_min <= y_max)) {
    fail("y_min/y_max", "must be finite with y_min <= y_max");
  }
  if (!(initial_y >= y_min && initial_y <= y_max)) {
    fail("initial_y", "= " + std::to_string(initial_y) + " is outside [y_min, y_max]");
  }
}

int ControlGrid::x_count() const { return count_values(0.0, layers - 1.0, x_step); }
int ControlGrid::y_count() const { return count_values(y_min, y_max, y_step); }

void to_json(nlohmann::json& out, const ControlGrid& grid) {
  out = {{"layers", grid.layers}, {"x_step", grid.x_step}, {"y_min", grid.y_min},
         {"y_max", grid.y_max},   {"y_step", grid.y_step}, {"initial_y", grid.initial_y}};
}

void from_json(const nlohmann::json& in, ControlGrid& grid) {
  if (!in.is_object()) throw std::invalid_argument("control grid: expected an object");
  for (const auto& [key, value] : in.items()) {
    if (!value.is_number()) fail(key, "must be a number");
    if (key == "layers") {
      if (!value.is_number_integer()) fail(key, "must be an integer");
      grid.layers = value.get<int>();
    } else if (key == "x_step") {
      grid.x_step = value.get<double>();
    } else if (key == "y_min") {
      grid.y_min = value.get<double>();
    } else if (key == "y_max") {
      grid.y_max = value.get<double>();
    } else if (key == "y_step") {
      grid.y_step = value.get<double>();
    } else if (key == "initial_y") {
      grid.initial_y = value.get<double>();
    } else {
      fail(key, "is not a field (expected layers, x_step, y_min, y_max, y_step, initial_y)");
    }
  }
  grid.validate();
}

}  // namespace midtune::bezier
