// Properties of the Bézier curves and per-layer sampling (LPES eqs. 3-6).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/bezier/control_grid.hpp"
#include "core/bezier/curve.hpp"
#include "tests/test_paths.hpp"

namespace midtune::bezier {
namespace {

// Random control points with strictly increasing x in [0, 31], y in [1, 2].
std::vector<ControlPoint> random_points(int degree, std::mt19937_64& engine) {
  std::vector<int> xs(32);
  for (int i = 0; i < 32; ++i) xs[i] = i;
  std::shuffle(xs.begin(), xs.end(), engine);
  xs.resize(static_cast<std::size_t>(degree + 1));
  std::sort(xs.begin(), xs.end());
  std::vector<ControlPoint> points;
  for (int x : xs) points.push_back({static_cast<double>(x), 1.0 + static_cast<double>(engine() % 11) / 10.0});
  return points;
}

TEST(Bezier, EndPointsAreFirstAndLastControlPoints) {
  std::mt19937_64 engine(1);
  for (int degree = kMinDegree; degree <= kMaxDegree; ++degree) {
    for (int draw = 0; draw < 50; ++draw) {
      const auto points = random_points(degree, engine);
      EXPECT_EQ(evaluate(points, 0.0), points.front());
      EXPECT_EQ(evaluate(points, 1.0), points.back());
      const auto scales = sample_layer_scales(CurveKind::bezier, points, 32);
      EXPECT_DOUBLE_EQ(scales.front(), points.front().y);
      EXPECT_DOUBLE_EQ(scales.back(), points.back().y);
    }
  }
}

TEST(Bezier, BernsteinBasisSumsToOne) {
  for (int degree = kMinDegree; degree <= kMaxDegree; ++degree) {
    for (double t : {0.0, 0.1, 0.37, 0.5, 0.93, 1.0}) {
      double sum = 0.0;
      for (int k = 0; k <= degree; ++k) sum += bernstein(degree, k, t);
      EXPECT_NEAR(sum, 1.0, 1e-14);
    }
  }
}

TEST(Bezier, CubicMatchesAppendixDClosedForm) {
  const std::vector<ControlPoint> points{{0, 1.5}, {10, 1.2}, {21, 1.9}, {31, 1.4}};
  for (double t = 0.0; t <= 1.0; t += 0.05) {
    const double u = 1.0 - t;
    // LPES eq. 13
    const double x = u * u * u * 0 + 3 * u * u * t * 10 + 3 * u * t * t * 21 + t * t * t * 31;
    const double y = u * u * u * 1.5 + 3 * u * u * t * 1.2 + 3 * u * t * t * 1.9 + t * t * t * 1.4;
    EXPECT_NEAR(evaluate(points, t).x, x, 1e-12);
    EXPECT_NEAR(evaluate(points, t).y, y, 1e-12);
  }
}

TEST(Bezier, DegreeOneAgreesWithTheStraightLine) {
  const std::vector<ControlPoint> points{{3, 1.2}, {27, 1.8}};
  for (double t = 0.0; t <= 1.0; t += 0.125) {
    EXPECT_NEAR(evaluate(points, t).x, 3 + 24 * t, 1e-12);
    EXPECT_NEAR(evaluate(points, t).y, 1.2 + 0.6 * t, 1e-12);
  }
  for (double x = 3.0; x <= 27.0; x += 0.7) EXPECT_NEAR(invert_x(points, x), (x - 3) / 24, 1e-9);
  const int layers = 16;
  const auto scales = sample_layer_scales(CurveKind::bezier, points, layers);
  ASSERT_EQ(scales.size(), static_cast<std::size_t>(layers));
  for (int h = 0; h < layers; ++h) EXPECT_NEAR(scales[h], 1.2 + 0.6 * h / (layers - 1), 1e-9);
  // The linear curve through two points is the same line.
  const auto linear = sample_layer_scales(CurveKind::linear, points, layers);
  for (int h = 0; h < layers; ++h) EXPECT_NEAR(linear[h], scales[h], 1e-9);
}

TEST(Bezier, MonotoneXGivesAnInvertibleCurve) {
  std::mt19937_64 engine(2);
  const InverseOptions options;
  for (int degree = kMinDegree; degree <= kMaxDegree; ++degree) {
    for (int draw = 0; draw < 30; ++draw) {
      const auto points = random_points(degree, engine);
      double previous_t = -1.0;
      for (double x = points.front().x; x <= points.back().x; x += 0.25) {
        const double t = invert_x(points, x, options);
        EXPECT_LE(std::abs(evaluate(points, t).x - x), options.x_tolerance) << "degree " << degree;
        EXPECT_GT(t, previous_t);  // t(x) strictly increasing
        previous_t = t;
      }
    }
  }
}

TEST(Bezier, ScalesStayInsideTheControlPointYRange) {
  std::mt19937_64 engine(3);
  for (CurveKind kind : {CurveKind::bezier, CurveKind::linear, CurveKind::step}) {
    for (int degree = kMinDegree; degree <= kMaxDegree; ++degree) {
      for (int draw = 0; draw < 40; ++draw) {
        const auto points = random_points(degree, engine);
        double lo = points.front().y;
        double hi = lo;
        for (const auto& p : points) lo = std::min(lo, p.y), hi = std::max(hi, p.y);
        for (double s : sample_layer_scales(kind, points, 32)) {
          EXPECT_GE(s, lo - 1e-12) << to_string(kind);
          EXPECT_LE(s, hi + 1e-12) << to_string(kind);
        }
      }
    }
  }
}

TEST(Bezier, LayerPositionsFollowEquationSix) {
  const std::vector<ControlPoint> points{{4, 1}, {9, 1}, {20, 1}};
  const auto x = layer_positions(points, 5);
  const std::vector<double> expected{4, 8, 12, 16, 20};
  EXPECT_EQ(x, expected);
  EXPECT_EQ(layer_positions(points, 1), std::vector<double>{4});
}

TEST(Bezier, LinearAndStepThroughKnownPoints) {
  const std::vector<ControlPoint> points{{0, 1.0}, {2, 2.0}, {4, 1.5}};
  // Five layers sample x = 0, 1, 2, 3, 4.
  const auto linear = sample_layer_scales(CurveKind::linear, points, 5);
  const std::vector<double> linear_expected{1.0, 1.5, 2.0, 1.75, 1.5};
  for (int h = 0; h < 5; ++h) EXPECT_NEAR(linear[h], linear_expected[h], 1e-12);
  const auto step = sample_layer_scales(CurveKind::step, points, 5);
  const std::vector<double> step_expected{1.0, 1.0, 2.0, 2.0, 1.5};
  EXPECT_EQ(step, step_expected);
}

TEST(Bezier, FlatCurveGivesConstantScales) {
  const std::vector<ControlPoint> points{{0, 1.5}, {10, 1.5}, {21, 1.5}, {31, 1.5}};
  for (double s : sample_layer_scales(CurveKind::bezier, points, 32)) EXPECT_NEAR(s, 1.5, 1e-12);
}

TEST(Bezier, RejectsBadInputWithAReason) {
  const std::vector<ControlPoint> not_increasing{{0, 1}, {5, 1}, {5, 2}, {9, 1}};
  EXPECT_THROW(sample_layer_scales(CurveKind::bezier, not_increasing, 8), std::invalid_argument);
  EXPECT_THROW(invert_x(not_increasing, 3.0), std::invalid_argument);
  const std::vector<ControlPoint> one{{0, 1}};
  EXPECT_THROW(evaluate(one, 0.5), std::invalid_argument);
  const std::vector<ControlPoint> eight(8, ControlPoint{0, 1});
  EXPECT_THROW(evaluate(eight, 0.5), std::invalid_argument);
  const std::vector<ControlPoint> line{{0, 1}, {9, 2}};
  EXPECT_THROW(evaluate(line, 1.5), std::invalid_argument);
  EXPECT_THROW(invert_x(line, 9.5), std::invalid_argument);
  EXPECT_THROW(sample_layer_scales(CurveKind::brute_force, line, 8), std::invalid_argument);
  EXPECT_THROW(sample_layer_scales(CurveKind::bezier, line, 0), std::invalid_argument);
  try {
    sample_layer_scales(CurveKind::bezier, not_increasing, 8);
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("x_1"), std::string::npos) << error.what();
  }
  EXPECT_THROW(curve_kind_from_string("spline"), std::invalid_argument);
  EXPECT_EQ(curve_kind_from_string("step"), CurveKind::step);
}

// tests/core/fixtures/make_bezier_fixture.py solves x(t) = x_h with numpy's
// polynomial roots instead of bisection.
TEST(Bezier, MatchesTheNumpyOracle) {
  std::ifstream file(midtune::testing::source_dir() + "/tests/core/fixtures/bezier_scales.json");
  ASSERT_TRUE(file) << "missing fixture bezier_scales.json";
  const auto fixture = nlohmann::json::parse(file);
  ASSERT_EQ(fixture["cases"].size(), 18u);
  for (const auto& item : fixture["cases"]) {
    std::vector<ControlPoint> points;
    for (const auto& p : item["points"]) points.push_back({p[0].get<double>(), p[1].get<double>()});
    const int layers = item["layers"].get<int>();
    const auto bezier = sample_layer_scales(CurveKind::bezier, points, layers);
    const auto linear = sample_layer_scales(CurveKind::linear, points, layers);
    const auto step = sample_layer_scales(CurveKind::step, points, layers);
    for (int h = 0; h < layers; ++h) {
      // |x(t) - x_h| <= 1e-9 bounds the y error by 1e-9 |dy/dx|.
      EXPECT_NEAR(bezier[h], item["bezier"][h].get<double>(), 1e-6) << item["points"].dump() << " h " << h;
      EXPECT_NEAR(linear[h], item["linear"][h].get<double>(), 1e-12);
      EXPECT_EQ(step[h], item["step"][h].get<double>());
    }
  }
}

TEST(ControlGrid, PaperDefaultsAndValidation) {
  ControlGrid grid;
  EXPECT_EQ(grid.x_count(), 32);
  EXPECT_EQ(grid.y_count(), 11);  // Table 9: 11 options for y
  nlohmann::json json = grid;
  EXPECT_EQ(json.get<ControlGrid>(), grid);
  EXPECT_THROW((nlohmann::json{{"y_step", 0}}.get<ControlGrid>()), std::invalid_argument);
  EXPECT_THROW((nlohmann::json{{"layres", 12}}.get<ControlGrid>()), std::invalid_argument);
  EXPECT_THROW((nlohmann::json{{"initial_y", 3.0}}.get<ControlGrid>()), std::invalid_argument);
}

}  // namespace
}  // namespace midtune::bezier
