// Bézier curves over 2-D control points and the per-layer scale sampling of
// LPES (docs/methods.md "LPES"; paper 000, eqs. 3-6 and Appendix D), plus the
// curve-type ablations of its Table 6 (piecewise linear, step).
//
// A curve of degree D has D + 1 control points P_k = (x_k, y_k); D = 1..6.
// Sampling needs the x_k strictly increasing (LPES eq. 10): then x(t) is
// strictly increasing on [0, 1] and t(x) is well defined.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace midtune::bezier {

struct ControlPoint {
  double x = 0.0;
  double y = 0.0;
  bool operator==(const ControlPoint&) const = default;
};

inline constexpr int kMinDegree = 1;
inline constexpr int kMaxDegree = 6;

// How per-layer scales come from the genome. brute_force has no control
// points (one free value per layer); it is listed so configs name it here.
enum class CurveKind { bezier, linear, step, brute_force };
const char* to_string(CurveKind kind);
// Throws std::invalid_argument naming the accepted kinds.
CurveKind curve_kind_from_string(const std::string& name);

// Bernstein basis b_k^D(t) = C(D,k) t^k (1-t)^(D-k)  (LPES eq. 4).
double bernstein(int degree, int k, double t);

// B(t) = sum_k b_k^D(t) P_k  (LPES eq. 3; eq. 13 for D = 3). t in [0, 1].
// Throws std::invalid_argument if the degree is outside 1..6 or t outside [0, 1].
ControlPoint evaluate(std::span<const ControlPoint> points, double t);

// Bisection inverse of x(t) (LPES Appendix D). It stops as soon as
// |x(t) - x| <= x_tolerance, or after max_iterations halvings (60 halvings
// shrink [0, 1] below 1e-18, i.e. to adjacent doubles), returning the
// midpoint of the last bracket.
struct InverseOptions {
  double x_tolerance = 1e-9;
  int max_iterations = 60;
};
// Requires strictly increasing x_k and x in [x_0, x_D] (values within
// x_tolerance outside are clamped); throws std::invalid_argument otherwise.
double invert_x(std::span<const ControlPoint> points, double x, InverseOptions options = {});

// x_h = x_0 + (x_D - x_0) h / (L - 1), h = 0..L-1  (LPES eq. 6). L = 1 gives {x_0}.
std::vector<double> layer_positions(std::span<const ControlPoint> points, int layers);

// Per-layer RoPE scales s_h for h = 0..L-1, all sampled at the eq. 6 x_h:
//  bezier: s_h = y(t(x_h))  (LPES eq. 5);
//  linear: piecewise linear interpolation through the control points;
//  step:   s_h = y_k of the last control point with x_k <= x_h (each point's
//          y holds until the next point; y_D is reached only at x_D).
// Throws std::invalid_argument for brute_force, a degree outside 1..6,
// x_k not strictly increasing, or layers < 1.
std::vector<double> sample_layer_scales(CurveKind kind, std::span<const ControlPoint> points,
                                        int layers, InverseOptions options = {});

// Eq. 10 (strict): x_0 < x_1 < ... < x_D.
bool strictly_increasing_x(std::span<const ControlPoint> points);

}  // namespace midtune::bezier
