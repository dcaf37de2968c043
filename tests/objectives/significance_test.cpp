// The held-out comparison statistics against values worked by hand or
// published: Wilson intervals from Newcombe (1998), Table I; an exact McNemar
// p-value summed by hand; a bootstrap that must be deterministic per seed.
#include "objectives/significance.hpp"

#include <gtest/gtest.h>

namespace midtune::stats {
namespace {

TEST(Wilson, MatchesNewcombesPublishedIntervals) {
  // Newcombe, "Two-sided confidence intervals for the single proportion",
  // Stat. Med. 1998, method 3 (score, no continuity correction).
  struct Case { int k, n; double low, high; };
  for (const Case c : {Case{81, 263, 0.2553, 0.3662}, Case{15, 148, 0.0624, 0.1605}, Case{0, 20, 0.0, 0.1611},
                       Case{1, 29, 0.0061, 0.1718}}) {
    const Interval i = wilson_interval(c.k, c.n);
    EXPECT_NEAR(i.low, c.low, 5e-5) << c.k << "/" << c.n;
    EXPECT_NEAR(i.high, c.high, 5e-5) << c.k << "/" << c.n;
  }
}

TEST(Wilson, EndsAreExactAndBadCountsRefused) {
  EXPECT_EQ(wilson_interval(0, 10).low, 0.0);
  EXPECT_EQ(wilson_interval(10, 10).high, 1.0);
  const Interval none = wilson_interval(0, 0);
  EXPECT_EQ(none.low, 0.0);
  EXPECT_EQ(none.high, 1.0);
  EXPECT_THROW(wilson_interval(5, 4), std::invalid_argument);
}

TEST(McNemar, ExactTwoSidedPByHand) {
  // 1 vs 9 discordant items: P(X <= 1 | n=10, 1/2) = (1 + 10) / 1024, doubled.
  EXPECT_NEAR(mcnemar_exact_p(1, 9), 22.0 / 1024.0, 1e-15);
  EXPECT_NEAR(mcnemar_exact_p(9, 1), 22.0 / 1024.0, 1e-15);
  // 0 vs 6: 2 / 64.
  EXPECT_NEAR(mcnemar_exact_p(0, 6), 2.0 / 64.0, 1e-15);
  // Balanced or no discordant items: no evidence at all.
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(5, 5), 1.0);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 0), 1.0);
  // Large counts stay finite and symmetric.
  EXPECT_NEAR(mcnemar_exact_p(400, 600), mcnemar_exact_p(600, 400), 1e-15);
  EXPECT_LT(mcnemar_exact_p(400, 600), 1e-9);
}

TEST(Discordance, CountsEachKind) {
  const Discordance d = discordance({{true, true}, {true, false}, {false, true}, {false, true}, {false, false}});
  EXPECT_EQ(d.a_only, 1);
  EXPECT_EQ(d.b_only, 2);
  EXPECT_EQ(d.total, 5);
}

std::vector<std::vector<PairedOutcome>> strata_with(int per_stratum, int a_only, int b_only) {
  std::vector<std::vector<PairedOutcome>> strata(3);
  for (auto& s : strata) {
    for (int i = 0; i < per_stratum; ++i) s.push_back({i % 2 == 0, i % 2 == 0});  // concordant
    for (int i = 0; i < a_only; ++i) s[i] = {true, false};
    for (int i = 0; i < b_only; ++i) s[a_only + i] = {false, true};
  }
  return strata;
}

double middle_difference(const std::vector<metrics::PositionAccuracy>& a, const std::vector<metrics::PositionAccuracy>& b) {
  return b[1].accuracy() - a[1].accuracy();
}

TEST(PairedBootstrap, DeterministicPerSeedAndCentredOnTheDifference) {
  const auto strata = strata_with(40, 2, 10);  // b beats a by 8 items of 40 in every stratum
  const Interval first = paired_bootstrap(strata, middle_difference, 2000, 0.95, 7);
  const Interval again = paired_bootstrap(strata, middle_difference, 2000, 0.95, 7);
  EXPECT_EQ(first.low, again.low);
  EXPECT_EQ(first.high, again.high);
  EXPECT_LT(first.low, 0.2);
  EXPECT_GT(first.high, 0.2);
  EXPECT_GT(first.low, 0.0);  // 8 of 12 discordant items one way: the interval leaves 0 out
  const Interval other_seed = paired_bootstrap(strata, middle_difference, 2000, 0.95, 8);
  EXPECT_NE(first.low + first.high, other_seed.low + other_seed.high);
}

TEST(PairedBootstrap, NoDiscordanceGivesAPointAndBadInputIsRefused) {
  const Interval none = paired_bootstrap(strata_with(10, 0, 0), middle_difference, 200, 0.95, 1);
  EXPECT_EQ(none.low, 0.0);
  EXPECT_EQ(none.high, 0.0);
  EXPECT_THROW(paired_bootstrap({{}}, middle_difference, 200, 0.95, 1), std::invalid_argument);
  EXPECT_THROW(paired_bootstrap(strata_with(10, 1, 0), middle_difference, 1, 0.95, 1), std::invalid_argument);
}

// The mean of 100 paired changes (0.01 .. 1.00, mean 0.505): the
// interval holds it, is narrower than the spread of the items, repeats for a
// seed; equal changes give a point; no items are refused.
TEST(MeanBootstrap, IntervalAroundTheMeanChange) {
  std::vector<double> changes;
  for (int i = 1; i <= 100; ++i) changes.push_back(i / 100.0);
  const Interval ci = mean_bootstrap(changes, 2000, 0.95, 3);
  EXPECT_LT(ci.low, 0.505);
  EXPECT_GT(ci.high, 0.505);
  // Standard error of the mean: 0.29 / sqrt(100) = 0.029; a 95 % interval ~0.11 wide.
  EXPECT_GT(ci.high - ci.low, 0.08);
  EXPECT_LT(ci.high - ci.low, 0.15);
  const Interval again = mean_bootstrap(changes, 2000, 0.95, 3);
  EXPECT_EQ(ci.low, again.low);
  EXPECT_EQ(ci.high, again.high);
  const Interval point = mean_bootstrap({-2.5, -2.5, -2.5}, 200, 0.95, 1);
  EXPECT_EQ(point.low, -2.5);
  EXPECT_EQ(point.high, -2.5);
  EXPECT_THROW(mean_bootstrap({}, 200, 0.95, 1), std::invalid_argument);
  EXPECT_THROW(mean_bootstrap(changes, 1, 0.95, 1), std::invalid_argument);
}

TEST(Power, NormalQuantileAndItemsNeeded) {
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-9);
  EXPECT_NEAR(normal_quantile(0.8), 0.8416212335729143, 1e-9);
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-12);
  // 10 vs 2 discordant of 40: p_disc = 0.3, d = 0.2 ->
  // (1.95996 sqrt(0.3) + 0.84162 sqrt(0.26))^2 / 0.04 = 56.45 -> 57 items.
  EXPECT_EQ(mcnemar_items_needed({2, 10, 40}), 57);
  EXPECT_FALSE(mcnemar_items_needed({3, 3, 40}).has_value());
  // The inverse: 57 items at p_disc 0.3 detect just under 0.2, 56 just over.
  const auto at57 = mcnemar_detectable_difference(57, 0.3), at56 = mcnemar_detectable_difference(56, 0.3);
  ASSERT_TRUE(at57 && at56);
  EXPECT_LT(*at57, 0.2);
  EXPECT_GT(*at56, *at57);
  EXPECT_NEAR(*at57, 0.2, 0.005);
  // More items detect smaller changes; no discordance, or too few items, nothing.
  EXPECT_LT(*mcnemar_detectable_difference(400, 0.3), *at57);
  EXPECT_FALSE(mcnemar_detectable_difference(100, 0.0).has_value());
  EXPECT_FALSE(mcnemar_detectable_difference(3, 0.3).has_value());
}

}  // namespace
}  // namespace midtune::stats
