#include "objectives/metrics.hpp"

#include <gtest/gtest.h>

namespace midtune::metrics {
namespace {

std::vector<PositionAccuracy> five_positions() {
  // 60, 40, 30, 50, 80 % at 0, 0.25, 0.5, 0.75, 1.
  return {{0.0, 6, 10}, {0.25, 4, 10}, {0.5, 3, 10}, {0.75, 5, 10}, {1.0, 8, 10}};
}

TEST(Metrics, TallyByPosition) {
  const auto tallies = tally_by_position({0.0, 0.5, 1.0}, {0, 2, 2, 1, 0}, {true, false, true, true, false});
  ASSERT_EQ(tallies.size(), 3u);
  EXPECT_EQ(tallies[0].total, 2u);
  EXPECT_EQ(tallies[0].correct, 1u);
  EXPECT_EQ(tallies[1].correct, 1u);
  EXPECT_EQ(tallies[2].total, 2u);
  EXPECT_DOUBLE_EQ(tallies[2].position, 1.0);
  EXPECT_THROW(tally_by_position({0.0}, {1}, {true}), std::invalid_argument);
  EXPECT_THROW(tally_by_position({0.0}, {0, 0}, {true}), std::invalid_argument);
}

TEST(Metrics, SummaryMatchesNumpy) {
  // numpy: mean 52, ptp 50, std (ddof 0) 17.204650534085253,
  // cov(delta, acc, ddof 0) 5.8, corrcoef 0.9009861607017401.
  const auto summary = summarize(five_positions());
  EXPECT_DOUBLE_EQ(summary.accuracy_percent[2], 30.0);
  EXPECT_NEAR(summary.mean, 52.0, 1e-12);
  EXPECT_NEAR(summary.gap, 50.0, 1e-12);
  EXPECT_NEAR(summary.std_dev, 17.204650534085253, 1e-9);
  EXPECT_NEAR(summary.u_shape_covariance, 5.8, 1e-9);
  EXPECT_NEAR(summary.u_shape_pearson, 0.9009861607017401, 1e-9);
}

TEST(Metrics, FlatCurveHasNoUShape) {
  const auto summary = summarize({{0.0, 5, 10}, {0.5, 5, 10}, {1.0, 5, 10}});
  EXPECT_DOUBLE_EQ(summary.gap, 0.0);
  EXPECT_DOUBLE_EQ(summary.u_shape_covariance, 0.0);
  EXPECT_DOUBLE_EQ(summary.u_shape_pearson, 0.0);
  // An inverted U (best in the middle) gives a negative index.
  EXPECT_LT(summarize({{0.0, 1, 10}, {0.5, 9, 10}, {1.0, 1, 10}}).u_shape_covariance, 0.0);
}

TEST(Metrics, DistanceFromMiddle) {
  EXPECT_DOUBLE_EQ(distance_from_middle(0.0), 1.0);
  EXPECT_DOUBLE_EQ(distance_from_middle(0.5), 0.0);
  EXPECT_DOUBLE_EQ(distance_from_middle(0.75), 0.5);
}

TEST(Metrics, EmptyPositionIsAnError) {
  EXPECT_THROW(summarize({{0.0, 0, 0}}), std::domain_error);
  EXPECT_THROW(summarize({}), std::invalid_argument);
}

TEST(BucketFitness, DefaultWeights) {
  // 0.2 * 0.6 + 0.3 * mean(0.4, 0.3, 0.5) + 0.5 * 0.8 = 0.12 + 0.12 + 0.4
  EXPECT_NEAR(bucket_fitness(five_positions(), {}), 0.64, 1e-12);
  EXPECT_NEAR(bucket_fitness(five_positions(), {1.0, 0.0, 0.0}), 0.6, 1e-12);
  EXPECT_NEAR(bucket_fitness(five_positions(), {0.0, 1.0, 0.0}), 0.4, 1e-12);
}

TEST(BucketFitness, PositionCountRules) {
  const std::vector<PositionAccuracy> two = {{0.0, 1, 2}, {1.0, 2, 2}};
  EXPECT_THROW(bucket_fitness(two, {}), std::invalid_argument);
  EXPECT_NEAR(bucket_fitness(two, {0.5, 0.0, 0.5}), 0.75, 1e-12);
  EXPECT_THROW(bucket_fitness({{0.0, 1, 2}}, {1.0, 0.0, 0.0}), std::invalid_argument);
}

TEST(BucketWeights, Validation) {
  EXPECT_NO_THROW((BucketWeights{0.2, 0.3, 0.5}.validate()));
  EXPECT_THROW((BucketWeights{-0.1, 0.6, 0.5}.validate()), std::invalid_argument);
  EXPECT_THROW((BucketWeights{0.2, 0.3, 0.6}.validate()), std::invalid_argument);
  try {
    BucketWeights{0.2, -0.3, 1.1}.validate();
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("objective.weights.middle"), std::string::npos);
  }
}

}  // namespace
}  // namespace midtune::metrics
