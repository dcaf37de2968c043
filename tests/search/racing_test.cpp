// Racing's pieces against hand-worked values: the Student t quantile, the
// paired bound, the stratified racing order, the slice schedule, the unit
// values whose mean is the λ-weighted fitness, and which contenders a look
// drops.
#include "core/search/racing.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "methods/intervention.hpp"

namespace midtune {
namespace {

TEST(Racing, StudentTQuantileMatchesTables) {
  // Tables of the t distribution (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2).
  EXPECT_NEAR(student_t_quantile(0.95, 1), 6.313751514675041, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.95, 3), 2.353363434801823, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 3), 3.182446305284263, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.95, 9), 1.833112932653634, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.042272456301238, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.05, 3), -2.353363434801823, 1e-9);
  EXPECT_EQ(student_t_quantile(0.5, 7), 0.0);
  EXPECT_NEAR(student_t_quantile(0.95, 100000), 1.6448536269514722, 1e-4) << "tends to the normal quantile";
  EXPECT_THROW(student_t_quantile(1.0, 3), std::invalid_argument);
  EXPECT_THROW(student_t_quantile(0.9, 0), std::invalid_argument);
}

TEST(Racing, BoundIsThePairedStudentTBoundWithFinitePopulationCorrection) {
  // d = (-0.5, -0.6, 0, -0.7): mean -0.45, s = sqrt(0.29 / 3); m = 4 of n = 8
  // units, so U = -0.45 + t(0.95, 3) * s / 2 * sqrt(1/2).
  const std::vector<double> d = {-0.5, -0.6, 0.0, -0.7};
  const RaceBound one = race_bound(d, 8, 0.95, 1, 0.0);
  EXPECT_NEAR(one.mean, -0.45, 1e-12);
  EXPECT_NEAR(one.upper, -0.1913083687157584, 1e-9);
  EXPECT_TRUE(one.drop);
  // Two looks (Bonferroni): t(0.975, 3).
  const RaceBound two = race_bound(d, 8, 0.95, 2, 0.0);
  EXPECT_NEAR(two.upper, -0.10017208391451815, 1e-9);
  EXPECT_TRUE(two.drop);
  // One unit against the child, three ties: U = -0.125 + t(0.95, 3) * 0.25 / 2 * sqrt(1/2) > 0.
  const RaceBound close = race_bound({-0.5, 0.0, 0.0, 0.0}, 8, 0.95, 1, 0.0);
  EXPECT_NEAR(close.upper, 0.08300990541810432, 1e-9);
  EXPECT_FALSE(close.drop);
  // No difference at all: the bound is 0, and a child that may tie is kept.
  EXPECT_FALSE(race_bound({0.0, 0.0, 0.0}, 8, 0.95, 1, 0.0).drop);
  // The blend margin keeps a child whose bound falls short of 0 by less than it.
  EXPECT_FALSE(race_bound({-1e-7, -1e-7, -1e-7}, 8, 0.95, 1, race_margin(FitnessKind::blend)).drop);
  EXPECT_TRUE(race_bound({-1e-7, -1e-7, -1e-7}, 8, 0.95, 1, race_margin(FitnessKind::accuracy)).drop);
  EXPECT_THROW(race_bound({-1.0}, 8, 0.95, 1, 0.0), std::invalid_argument) << "one unit has no variance";
  EXPECT_THROW(race_bound(std::vector<double>(8, -1.0), 8, 0.95, 1, 0.0), std::invalid_argument)
      << "the whole split needs no bound";
}

TEST(Racing, UnitsHoldOneItemOfEveryPositionInHashOrder) {
  // Three positions x three base items, position-major as a slice orders them.
  const std::vector<std::string> bases = {"kv-a", "kv-b", "kv-c"};
  std::vector<std::size_t> position_index;
  std::vector<std::string> keys;
  for (std::size_t p = 0; p < 3; ++p)
    for (const std::string& b : bases) {
      position_index.push_back(p);
      keys.push_back(b);
    }
  const auto units = race_units(position_index, 3, keys);
  ASSERT_EQ(units.size(), 3u);
  std::vector<std::string> hashes;
  for (const auto& unit : units) {
    ASSERT_EQ(unit.size(), 3u);
    for (std::size_t p = 0; p < 3; ++p) {
      EXPECT_EQ(position_index[unit[p]], p) << "the p-th item of a unit sits at position p";
      EXPECT_EQ(keys[unit[p]], keys[unit[0]]) << "one base item at every position";
    }
    hashes.push_back(fnv1a_hex(keys[unit[0]]));
  }
  EXPECT_TRUE(std::is_sorted(hashes.begin(), hashes.end()));
  // The order depends on the keys only, not on how the slice lists them.
  std::vector<std::size_t> reversed_index(position_index.rbegin(), position_index.rend());
  std::vector<std::string> reversed_keys(keys.rbegin(), keys.rend());
  const auto again = race_units(reversed_index, 3, reversed_keys);
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(reversed_keys[again[k][0]], keys[units[k][0]]);

  EXPECT_THROW(race_units({0, 0, 1}, 2, {}), std::invalid_argument) << "unequal positions";
}

TEST(Racing, ScheduleGrowsByStepAndEndsWithTheWholeSplit) {
  EXPECT_EQ(race_schedule({3, 2, 0.95}, 8), (std::vector<std::size_t>{3, 5, 7, 8}));
  EXPECT_EQ(race_schedule({4, 4, 0.95}, 8), (std::vector<std::size_t>{4, 8}));
  EXPECT_EQ(race_schedule({8, 1, 0.95}, 8), (std::vector<std::size_t>{8}));
  EXPECT_EQ(race_looks(race_schedule({3, 2, 0.95}, 8), 8), 3u);
  EXPECT_EQ(race_looks(race_schedule({1, 1, 0.95}, 3), 3), 1u) << "a one-unit slice is no look";
  EXPECT_THROW(race_schedule({0, 1, 0.95}, 8), std::invalid_argument);
}

TEST(Racing, UnitDifferencesAverageToTheFitnessDifference) {
  const metrics::BucketWeights lambda{0.2, 0.3, 0.5};
  const std::vector<double> w = position_weights(lambda, 5);
  ASSERT_EQ(w.size(), 5u);
  EXPECT_DOUBLE_EQ(w[0], 0.2);
  EXPECT_DOUBLE_EQ(w[2], 0.1);
  EXPECT_DOUBLE_EQ(w[4], 0.5);
  // Five positions x four units; child and cut-off correct by a fixed pattern.
  std::vector<std::size_t> position_index;
  std::vector<SampleRecord> child, cutoff;
  for (std::size_t p = 0; p < 5; ++p)
    for (int k = 0; k < 4; ++k) {
      position_index.push_back(p);
      SampleRecord c, o;
      c.sample_id = o.sample_id = std::to_string(p) + "-" + std::to_string(k);
      c.correct = (p + k) % 2 == 0;
      o.correct = (p * k) % 3 == 0;
      c.gold_logprob = -0.1 * static_cast<double>(p + k);
      o.gold_logprob = -0.2 * static_cast<double>(k);
      child.push_back(c);
      cutoff.push_back(o);
    }
  std::vector<const SampleRecord*> child_by_item, cutoff_by_item;
  for (std::size_t i = 0; i < child.size(); ++i) {
    child_by_item.push_back(&child[i]);
    cutoff_by_item.push_back(&cutoff[i]);
  }
  const auto units = race_units(position_index, 5, {});
  const auto fitness_of = [&](const std::vector<SampleRecord>& samples, bool logprob) {
    std::vector<double> mean(5, 0.0);
    for (std::size_t i = 0; i < samples.size(); ++i)
      mean[position_index[i]] += (logprob ? *samples[i].gold_logprob : samples[i].correct ? 1.0 : 0.0) / 4.0;
    return metrics::bucket_weighted(mean, lambda);
  };
  for (const FitnessKind kind : {FitnessKind::accuracy, FitnessKind::gold_logprob}) {
    const bool logprob = kind == FitnessKind::gold_logprob;
    const auto y_child = race_unit_values(units, 4, w, position_index, child_by_item, kind);
    const auto y_cutoff = race_unit_values(units, 4, w, position_index, cutoff_by_item, kind);
    ASSERT_EQ(y_child.size(), 4u);
    double child_mean = 0.0, difference = 0.0;
    for (std::size_t k = 0; k < 4; ++k) {
      child_mean += y_child[k] / 4.0;
      difference += (y_child[k] - y_cutoff[k]) / 4.0;
    }
    EXPECT_NEAR(child_mean, fitness_of(child, logprob), 1e-12);
    EXPECT_NEAR(difference, fitness_of(child, logprob) - fitness_of(cutoff, logprob), 1e-12);
    EXPECT_EQ(race_unit_values(units, 2, w, position_index, child_by_item, kind).size(), 2u);
  }
  child_by_item[units[0][3]] = nullptr;
  EXPECT_THROW(race_unit_values(units, 1, w, position_index, child_by_item, FitnessKind::accuracy), std::logic_error)
      << "a unit's item without a stored result";
}

// Values on 4 of 8 units. Against `low` = (0, 0, 0, 0): `high` (1, 1, 0.9,
// 1.1) is better by the bound (differences mean -1, s = 0.0816, U = -1 +
// t(0.95, 3) * 0.0816 / 2 * sqrt(1/2) < 0); `near` (0.2, -0.2, 0.1, -0.1)
// is not (mean 0).
TEST(Racing, ALookDropsWhatNParentsOrTheSiblingBeat) {
  const std::vector<double> low = {0.0, 0.0, 0.0, 0.0};
  const std::vector<double> high = {1.0, 1.0, 0.9, 1.1};
  const std::vector<double> near = {0.2, -0.2, 0.1, -0.1};
  ASSERT_TRUE(race_bound({-1.0, -1.0, -0.9, -1.1}, 8, 0.95, 1, 0.0).drop);
  ASSERT_FALSE(race_bound(near, 8, 0.95, 1, 0.0).drop);
  const auto drops = [](const std::vector<RaceContender>& c, int parents) {
    return race_drops(c, parents, 8, 0.95, 1, 0.0);
  };
  // Two parent places: beaten by two carried parents, a child is dropped;
  // by one, it may still take the second place.
  EXPECT_EQ(drops({{high, false}, {high, false}, {low, true}}, 2), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(drops({{high, false}, {near, false}, {low, true}}, 2), (std::vector<bool>{false, false, false}));
  // Children count as much as carried parents: one carried parent that
  // `low` ties and two children that beat it. The children themselves stay.
  EXPECT_EQ(drops({{low, false}, {high, true}, {high, true}, {low, true}}, 2),
            (std::vector<bool>{false, false, false, true}));
  // Scored in full (a cached result): never dropped, whatever beats it.
  EXPECT_EQ(drops({{high, false}, {high, false}, {low, false}}, 2), (std::vector<bool>{false, false, false}));
  // Crossover siblings: the fitter alone is kept, so the other goes as soon
  // as the sibling is better, with parent places to spare.
  EXPECT_EQ(drops({{low, false}, {high, true, 2}, {low, true, 1}}, 3), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(drops({{low, false}, {near, true, 2}, {low, true, 1}}, 3), (std::vector<bool>{false, false, false}));
  // The N best by slice mean are never dropped, even when all are far apart.
  const std::vector<double> higher = {2.0, 2.1, 1.9, 2.0};
  EXPECT_EQ(drops({{higher, true}, {high, true}, {low, true}}, 1), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(drops({{higher, true}, {high, true}, {low, true}}, 2), (std::vector<bool>{false, false, true}));
  EXPECT_THROW(drops({{low, true, 0}}, 1), std::invalid_argument) << "its own sibling";
  EXPECT_THROW(drops({{low, true}, {{0.0, 0.0}, true}}, 1), std::invalid_argument) << "slices of different lengths";
}

}  // namespace
}  // namespace midtune
