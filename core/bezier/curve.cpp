#include "core/bezier/curve.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace midtune::bezier {
namespace {

void require_degree(std::span<const ControlPoint> points) {
  const int degree = static_cast<int>(points.size()) - 1;
  if (degree < kMinDegree || degree > kMaxDegree) {
    throw std::invalid_argument("Bézier curve: " + std::to_string(points.size()) +
                                " control points given, need 2..7 (degree 1..6)");
  }
}

void require_increasing(std::span<const ControlPoint> points) {
  for (std::size_t k = 1; k < points.size(); ++k) {
    if (!(points[k - 1].x < points[k].x)) {
      throw std::invalid_argument("Bézier curve: control point x must be strictly increasing "
                                  "(LPES eq. 10), but x_" + std::to_string(k - 1) + " = " +
                                  std::to_string(points[k - 1].x) + " >= x_" + std::to_string(k) +
                                  " = " + std::to_string(points[k].x));
    }
  }
}

double binomial(int n, int k) {
  double result = 1.0;
  for (int i = 1; i <= k; ++i) result = result * (n - k + i) / i;
  return result;
}

}  // namespace

const char* to_string(CurveKind kind) {
  switch (kind) {
    case CurveKind::bezier: return "bezier";
    case CurveKind::linear: return "linear";
    case CurveKind::step: return "step";
    case CurveKind::brute_force: return "brute_force";
  }
  return "?";
}

CurveKind curve_kind_from_string(const std::string& name) {
  for (CurveKind kind : {CurveKind::bezier, CurveKind::linear, CurveKind::step,
                         CurveKind::brute_force}) {
    if (name == to_string(kind)) return kind;
  }
  throw std::invalid_argument("curve: unknown kind '" + name +
                              "' (expected bezier, linear, step or brute_force)");
}

double bernstein(int degree, int k, double t) {
  if (k < 0 || k > degree) return 0.0;
  return binomial(degree, k) * std::pow(t, k) * std::pow(1.0 - t, degree - k);  // LPES eq. 4
}

ControlPoint evaluate(std::span<const ControlPoint> points, double t) {
  require_degree(points);
  if (!(t >= 0.0 && t <= 1.0)) {
    throw std::invalid_argument("Bézier curve: t = " + std::to_string(t) + " is outside [0, 1]");
  }
  const int degree = static_cast<int>(points.size()) - 1;
  ControlPoint sum{0.0, 0.0};
  for (int k = 0; k <= degree; ++k) {  // LPES eq. 3
    const double weight = bernstein(degree, k, t);
    sum.x += weight * points[k].x;
    sum.y += weight * points[k].y;
  }
  return sum;
}

double invert_x(std::span<const ControlPoint> points, double x, InverseOptions options) {
  require_degree(points);
  require_increasing(points);
  const double x_first = points.front().x;
  const double x_last = points.back().x;
  if (x < x_first - options.x_tolerance || x > x_last + options.x_tolerance || std::isnan(x)) {
    throw std::invalid_argument("Bézier curve: x = " + std::to_string(x) + " is outside [" +
                                std::to_string(x_first) + ", " + std::to_string(x_last) + "]");
  }
  x = std::clamp(x, x_first, x_last);
  if (x == x_first) return 0.0;  // B(0) = P_0, B(1) = P_D exactly
  if (x == x_last) return 1.0;
  // x(t) is strictly increasing: x'(t) = D sum_k (x_{k+1} - x_k) b_k^{D-1}(t) > 0.
  double lo = 0.0;
  double hi = 1.0;
  double mid = 0.5;
  for (int iteration = 0; iteration < options.max_iterations; ++iteration) {
    mid = 0.5 * (lo + hi);
    const double x_mid = evaluate(points, mid).x;
    if (std::abs(x_mid - x) <= options.x_tolerance) return mid;
    if (x_mid < x) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

std::vector<double> layer_positions(std::span<const ControlPoint> points, int layers) {
  require_degree(points);
  if (layers < 1) {
    throw std::invalid_argument("layer sampling: layers = " + std::to_string(layers) +
                                ", need at least 1");
  }
  std::vector<double> positions(static_cast<std::size_t>(layers));
  const double x_first = points.front().x;
  const double span = points.back().x - x_first;
  for (int h = 0; h < layers; ++h) {  // LPES eq. 6
    positions[h] = layers == 1 ? x_first : x_first + span * h / (layers - 1);
  }
  if (layers > 1) positions.back() = points.back().x;  // exact end despite rounding
  return positions;
}

namespace {

double linear_at(std::span<const ControlPoint> points, double x) {
  std::size_t k = 0;
  while (k + 2 < points.size() && x >= points[k + 1].x) ++k;
  const ControlPoint& a = points[k];
  const ControlPoint& b = points[k + 1];
  const double u = std::clamp((x - a.x) / (b.x - a.x), 0.0, 1.0);
  return a.y + u * (b.y - a.y);
}

double step_at(std::span<const ControlPoint> points, double x) {
  std::size_t k = 0;
  while (k + 1 < points.size() && x >= points[k + 1].x) ++k;
  return points[k].y;
}

}  // namespace

std::vector<double> sample_layer_scales(CurveKind kind, std::span<const ControlPoint> points,
                                        int layers, InverseOptions options) {
  if (kind == CurveKind::brute_force) {
    throw std::invalid_argument("curve brute_force has no control points: its genome holds the "
                                "per-layer scales themselves");
  }
  require_degree(points);
  require_increasing(points);
  std::vector<double> scales;
  scales.reserve(static_cast<std::size_t>(std::max(layers, 0)));
  for (double x : layer_positions(points, layers)) {
    switch (kind) {
      case CurveKind::bezier:  // LPES eq. 5: s_h = proj_y B(t(x_h))
        scales.push_back(evaluate(points, invert_x(points, x, options)).y);
        break;
      case CurveKind::linear: scales.push_back(linear_at(points, x)); break;
      case CurveKind::step: scales.push_back(step_at(points, x)); break;
      case CurveKind::brute_force: break;
    }
  }
  return scales;
}

bool strictly_increasing_x(std::span<const ControlPoint> points) {
  for (std::size_t k = 1; k < points.size(); ++k) {
    if (!(points[k - 1].x < points[k].x)) return false;
  }
  return true;
}

}  // namespace midtune::bezier
