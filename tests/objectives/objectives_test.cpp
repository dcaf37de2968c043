#include <gtest/gtest.h>

#include "core/ga/lpes_space.hpp"
#include "objectives/objective.hpp"

namespace midtune {
namespace {

ObjectiveConfig lpes_config() {
  ObjectiveConfig c;
  c.kind = "lpes";
  return c;
}

TEST(LpesObjective, DecodesOneScalePerLayerFromTheBezierCurve) {
  const auto objective = make_objective(lpes_config(), 32);
  EXPECT_EQ(objective->name(), "lpes");
  EXPECT_EQ(objective->space().size(), 8u) << "D = 3: four control points (x, y)";
  const Genome initial = objective->initial_genome();
  // LPES eq. 8: P_k = (k(L-1)/D, 1.5), x rounded to the grid.
  EXPECT_EQ(initial, (Genome{0, 1.5, 10, 1.5, 21, 1.5, 31, 1.5}));
  const Intervention flat = objective->decode(initial);
  ASSERT_EQ(flat.rope_scale.size(), 32u);
  for (const auto& row : flat.rope_scale) {
    ASSERT_EQ(row.size(), 1u) << "every head of a layer shares its scale";
    EXPECT_NEAR(row[0], 1.5, 1e-9);
  }
  const Genome rising = {0, 1.0, 10, 1.2, 21, 1.8, 31, 2.0};
  const Intervention decoded = objective->decode(rising);
  LpesSpec spec;
  spec.grid.layers = 32;
  const std::vector<double> expected = lpes_layer_scales(spec, rising);
  ASSERT_EQ(decoded.rope_scale.size(), expected.size());
  for (size_t h = 0; h < expected.size(); ++h) EXPECT_DOUBLE_EQ(decoded.rope_scale[h][0], expected[h]);
  EXPECT_DOUBLE_EQ(decoded.rope_scale.front()[0], 1.0);
  EXPECT_DOUBLE_EQ(decoded.rope_scale.back()[0], 2.0);
  for (size_t h = 1; h < expected.size(); ++h) EXPECT_GE(decoded.rope_scale[h][0], decoded.rope_scale[h - 1][0]);
}

TEST(LpesObjective, RefusesInvalidGenomesAndConfigs) {
  const auto objective = make_objective(lpes_config(), 32);
  EXPECT_THROW(objective->decode({10, 1.5, 5, 1.5, 21, 1.5, 31, 1.5}), std::invalid_argument) << "x must increase";
  EXPECT_THROW(objective->decode({0, 2.5, 10, 1.5, 21, 1.5, 31, 1.5}), std::invalid_argument) << "y above y_max";
  EXPECT_THROW(objective->decode({0, 1.5}), std::invalid_argument);
  ObjectiveConfig bad = lpes_config();
  bad.lpes.curve = "spline";
  try {
    make_objective(bad, 32);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("objective.lpes.curve"), std::string::npos) << e.what();
  }
  ObjectiveConfig unknown;
  unknown.kind = "nonesuch";
  try {
    make_objective(unknown, 32);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("objective.kind"), std::string::npos) << e.what();
  }
}

TEST(PiObjective, OneScaleEverywhere) {
  ObjectiveConfig c;
  c.kind = "pi";
  c.pi = {1.0, 2.0, 0.25};
  const auto objective = make_objective(c, 30);
  EXPECT_EQ(objective->space().size(), 1u);
  EXPECT_EQ(objective->initial_genome(), Genome{1.5});
  const Intervention iv = objective->decode({1.75});
  ASSERT_EQ(iv.rope_scale.size(), 1u);
  ASSERT_EQ(iv.rope_scale[0].size(), 1u);
  EXPECT_DOUBLE_EQ(iv.scale_for(17, 3), 1.75);
  EXPECT_THROW(objective->decode({1.3}), std::invalid_argument) << "off the 0.25 grid";
  c.pi.min = 0.0;
  EXPECT_THROW(make_objective(c, 30), std::invalid_argument);
}

TEST(Objectives, FitnessUsesTheExperimentsLambdaWeights) {
  ObjectiveConfig c = lpes_config();
  c.weights = {0.5, 0.25, 0.25};
  const auto objective = make_objective(c, 8);
  // correct/total per position: beginning 4/4, middle 1/4 and 3/4 (mean 0.5), end 0/4.
  const std::vector<metrics::PositionAccuracy> scores = {{0.0, 4, 4}, {0.3, 1, 4}, {0.6, 3, 4}, {1.0, 0, 4}};
  // LPES: λ_B·acc_B + λ_M·acc_M + λ_E·acc_E = 0.5·1 + 0.25·0.5 + 0.25·0
  EXPECT_DOUBLE_EQ(objective->fitness(scores), 0.625);
  c.kind = "pi";
  EXPECT_DOUBLE_EQ(make_objective(c, 8)->fitness(scores), 0.625);
}

}  // namespace
}  // namespace midtune
