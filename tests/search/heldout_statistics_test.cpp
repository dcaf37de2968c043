// The held-out report's statistics on rows built by hand: intervals per
// role, the best paired with every other role item by item, a verdict that
// says "detected" only when the paired test and the interval agree.
#include "core/search/heldout_statistics.hpp"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "objectives/significance.hpp"

namespace midtune {
namespace {

using ::testing::HasSubstr;

// `correct(i, position)` for items 0..n-1 at positions 0, 0.5, 1.
HeldoutRow role(const std::string& name, int n, const std::function<bool(int, double)>& correct) {
  HeldoutRow row;
  row.role = name;
  row.split = "heldout";
  for (double position : {0.0, 0.5, 1.0})
    for (int i = 0; i < n; ++i) {
      SampleRecord s;
      s.sample_id = "p" + std::to_string(position) + "-" + std::to_string(100 + i);
      s.gold_position = position;
      s.correct = correct(i, position);
      row.samples.push_back(s);
    }
  return row;
}

TEST(HeldoutStatistics, IntervalsPairedTestsAndVerdicts) {
  // Baseline: 4 of 20 right everywhere. Best: the same 4, plus 9 more in the middle.
  const HeldoutRow baseline = role("baseline", 20, [](int i, double) { return i < 4; });
  const HeldoutRow best = role("best", 20, [](int i, double p) { return i < (p == 0.5 ? 13 : 4); });
  const HeldoutRow paper = role("paper-default", 20, [](int i, double p) { return i < (p == 0.5 ? 12 : 4); });
  HeldoutStatisticsOptions options;
  const nlohmann::json stats = heldout_statistics({baseline, paper, best}, options);

  ASSERT_EQ(stats["intervals"].size(), 3u);
  const auto& base_middle = stats["intervals"][0]["positions"][1];
  const stats::Interval wilson = stats::wilson_interval(4, 20);
  EXPECT_DOUBLE_EQ(base_middle["low"].get<double>(), wilson.low);
  EXPECT_DOUBLE_EQ(base_middle["high"].get<double>(), wilson.high);
  EXPECT_EQ(stats["intervals"][0]["pooled"]["samples"], 60);

  // best vs baseline, best vs paper-default, then paper-default vs baseline.
  ASSERT_EQ(stats["comparisons"].size(), 3u);
  const auto& vs_base = stats["comparisons"][0];
  EXPECT_EQ(vs_base["against"], "baseline");
  EXPECT_DOUBLE_EQ(vs_base["middle"]["difference_points"].get<double>(), 45.0);
  EXPECT_EQ(vs_base["middle"]["role_only"], 9);
  EXPECT_EQ(vs_base["middle"]["against_only"], 0);
  EXPECT_DOUBLE_EQ(vs_base["middle"]["mcnemar_p"].get<double>(), stats::mcnemar_exact_p(0, 9));  // 2/512
  EXPECT_GT(vs_base["middle"]["ci_points"][0].get<double>(), 0.0);
  EXPECT_TRUE(vs_base["detected"].get<bool>());
  EXPECT_THAT(vs_base["verdict"].get<std::string>(), HasSubstr("best vs baseline: middle +45.0 points, 95 % CI ["));
  // Fitness: only the middle moved, by 45 points, weighted 0.3.
  EXPECT_NEAR(vs_base["fitness"]["difference_points"].get<double>(), 13.5, 1e-9);

  const auto& vs_paper = stats["comparisons"][1];
  EXPECT_EQ(vs_paper["against"], "paper-default");
  EXPECT_FALSE(vs_paper["detected"].get<bool>());  // one item apart
  EXPECT_THAT(vs_paper["verdict"].get<std::string>(), HasSubstr("no difference detected (middle +5.0 points"));
  EXPECT_THAT(vs_paper["verdict"].get<std::string>(), HasSubstr("items per position would detect"));
  // Beside each verdict, what that many middle items can tell apart: 20
  // items with 9 discordant detect a change this size; with 1 discordant, none.
  ASSERT_TRUE(vs_base["detectable_points"].is_number());
  EXPECT_NEAR(vs_base["detectable_points"].get<double>(),
              100.0 * *stats::mcnemar_detectable_difference(20, 9.0 / 20.0), 1e-9);
  EXPECT_THAT(vs_base["verdict"].get<std::string>(), HasSubstr("; 20 middle items detect a change of "));
  EXPECT_TRUE(vs_paper["detectable_points"].is_null());
  EXPECT_THAT(vs_paper["verdict"].get<std::string>(), HasSubstr("20 middle items are too few to detect any change"));
  // Whether the paper's own setting moves the model: 8 more in the middle.
  const auto& paper_vs_base = stats["comparisons"][2];
  EXPECT_EQ(paper_vs_base["role"], "paper-default");
  EXPECT_EQ(paper_vs_base["against"], "baseline");
  EXPECT_DOUBLE_EQ(paper_vs_base["middle"]["difference_points"].get<double>(), 40.0);
  EXPECT_EQ(paper_vs_base["middle"]["role_only"], 8);
  EXPECT_EQ(paper_vs_base["middle"]["against_only"], 0);
  EXPECT_THAT(paper_vs_base["verdict"].get<std::string>(), HasSubstr("paper-default vs baseline: middle +40.0 points"));
  EXPECT_EQ(heldout_verdicts(stats).size(), 3u);
}

// Where neither role answers the middle, the paired gold log-probability
// still shows which way the setting moved the model: every middle item 1.5
// nats nearer the gold, none at the ends counted; rows without
// log-probabilities (generated answers) get none.
TEST(HeldoutStatistics, MiddleGoldLogprobChangeIsPaired) {
  HeldoutRow baseline = role("baseline", 10, [](int, double p) { return p == 0.0; });
  HeldoutRow best = role("best", 10, [](int, double p) { return p == 0.0; });
  for (std::size_t i = 0; i < baseline.samples.size(); ++i) {
    baseline.samples[i].gold_logprob = -6.0 - 0.1 * static_cast<double>(i % 10);
    best.samples[i].gold_logprob =
        *baseline.samples[i].gold_logprob + (baseline.samples[i].gold_position == 0.5 ? 1.5 : -4.0);
  }
  const nlohmann::json stats = heldout_statistics({baseline, best}, {});
  const auto& middle = stats["comparisons"][0]["middle"];
  EXPECT_DOUBLE_EQ(middle["difference_points"].get<double>(), 0.0);
  ASSERT_TRUE(middle.contains("gold_logprob"));
  EXPECT_EQ(middle["gold_logprob"]["items"], 10);
  EXPECT_NEAR(middle["gold_logprob"]["mean_difference"].get<double>(), 1.5, 1e-12);
  EXPECT_NEAR(middle["gold_logprob"]["ci"][0].get<double>(), 1.5, 1e-12);
  EXPECT_NEAR(middle["gold_logprob"]["ci"][1].get<double>(), 1.5, 1e-12);

  const nlohmann::json generated = heldout_statistics(
      {role("baseline", 10, [](int, double) { return false; }), role("best", 10, [](int, double) { return false; })},
      {});
  EXPECT_FALSE(generated["comparisons"][0]["middle"].contains("gold_logprob"));
}

// Pareto front members are the search's own picks: compared with the best
// only, not each with the baseline as a reference setting is.
TEST(HeldoutStatistics, FrontMembersAreNotComparedWithTheBaseline) {
  const HeldoutRow baseline = role("baseline", 10, [](int i, double) { return i < 2; });
  const HeldoutRow best = role("best", 10, [](int i, double) { return i < 6; });
  const HeldoutRow front = role("front-7", 10, [](int i, double) { return i < 4; });
  const nlohmann::json stats = heldout_statistics({baseline, best, front}, {});
  ASSERT_EQ(stats["comparisons"].size(), 2u);
  EXPECT_EQ(stats["comparisons"][0]["against"], "baseline");
  EXPECT_EQ(stats["comparisons"][1]["against"], "front-7");
}

// A p-value far below 0.001 keeps its size in the reports (25 discordant
// items all one way: 2 * 0.5^25), never a fixed "0.000".
TEST(HeldoutStatistics, SmallPValuesPrintTheirSize) {
  EXPECT_EQ(format_p_value(2 * std::pow(0.5, 25)), "6.0e-08");
  EXPECT_EQ(format_p_value(0.618), "0.618");
  EXPECT_EQ(format_p_value(1.0), "1.000");
}

TEST(HeldoutStatistics, SameOutcomesGiveNoDifferenceAndNoPowerEstimate) {
  const HeldoutRow a = role("baseline", 10, [](int i, double) { return i % 3 == 0; });
  HeldoutRow b = a;
  b.role = "best";
  const nlohmann::json stats = heldout_statistics({a, b}, {});
  const auto& c = stats["comparisons"][0];
  EXPECT_FALSE(c["detected"].get<bool>());
  EXPECT_TRUE(c["items_needed_per_position"].is_null());
  EXPECT_DOUBLE_EQ(c["middle"]["mcnemar_p"].get<double>(), 1.0);
}

TEST(HeldoutStatistics, NoBestMeansIntervalsOnly) {
  const nlohmann::json stats = heldout_statistics({role("baseline", 5, [](int, double) { return true; })}, {});
  EXPECT_EQ(stats["intervals"].size(), 1u);
  EXPECT_TRUE(stats["comparisons"].empty());
}

TEST(HeldoutStatistics, CorrelationOfAccuracyAndGoldLogprob) {
  // Without log-probabilities (generate metric) there is no correlation entry.
  const HeldoutRow plain = role("best", 4, [](int i, double) { return i < 2; });
  EXPECT_FALSE(heldout_statistics({plain}, {}).contains("logprob_correlation"));
  // Correct items at −1, wrong ones at −3 everywhere: r = 1 exactly. A second
  // role with the log-probabilities reversed in one item lowers the pooled r.
  HeldoutRow best = plain;
  for (SampleRecord& s : best.samples) s.gold_logprob = s.correct ? -1.0 : -3.0;
  HeldoutRow baseline = best;
  baseline.role = "baseline";
  baseline.samples[0].gold_logprob = -3.0;  // a correct item with a wrong item's log-probability
  const nlohmann::json stats = heldout_statistics({baseline, best}, {});
  const nlohmann::json& c = stats.at("logprob_correlation");
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[1]["role"], "best");
  EXPECT_EQ(c[1]["samples"], 12);
  EXPECT_DOUBLE_EQ(c[1]["pearson_r"].get<double>(), 1.0);
  // baseline by hand: x has six 1s and six 0s; y over the 1s: five −1 and one
  // −3, over the 0s: six −3. sxy = ½(−8) − ½(−18) = 5, sxx = 3,
  // syy = 68 − 12 (13/6)² = 35/3, so r = 5 / sqrt(35) = sqrt(5/7).
  EXPECT_DOUBLE_EQ(c[0]["pearson_r"].get<double>(), std::sqrt(5.0 / 7.0));
  EXPECT_LT(c[0]["pearson_r"].get<double>(), 1.0);
  EXPECT_EQ(c[2]["role"], "all roles");
  EXPECT_EQ(c[2]["samples"], 24);
}

TEST(Pearson, KnownValuesAndDegenerateInputs) {
  EXPECT_DOUBLE_EQ(*stats::pearson({1, 2, 3}, {2, 4, 6}), 1.0);
  EXPECT_DOUBLE_EQ(*stats::pearson({1, 2, 3}, {3, 2, 1}), -1.0);
  // x = (0, 0, 1, 1), y = (1, 2, 2, 3): sxy = 1, sxx = 1, syy = 2 -> r = 1/sqrt 2.
  EXPECT_DOUBLE_EQ(*stats::pearson({0, 0, 1, 1}, {1, 2, 2, 3}), 1.0 / std::sqrt(2.0));
  EXPECT_FALSE(stats::pearson({1, 1, 1}, {1, 2, 3}).has_value());
  EXPECT_FALSE(stats::pearson({1}, {1}).has_value());
  EXPECT_THROW(stats::pearson({1, 2}, {1}), std::invalid_argument);
}

}  // namespace
}  // namespace midtune

namespace midtune {
namespace {

// Ten chunks: the gold listed at 0.5 sits in chunk 5 of 0..9 (depth 5/9).
// Intervals and comparisons name it 0.5, as position_scores do, with the
// realised depth beside it; positions where the two agree carry no second name.
TEST(HeldoutStatistics, PositionsAreNamedAsListedWithTheRealisedDepthBeside) {
  const auto realised = [](HeldoutRow row) {
    row.position_scores = nlohmann::json::array();
    for (double listed : {0.0, 0.5, 1.0}) row.position_scores.push_back({{"position", listed}});
    for (SampleRecord& s : row.samples)
      if (s.gold_position == 0.5) s.gold_position = 5.0 / 9.0;
    return row;
  };
  const HeldoutRow baseline = realised(role("baseline", 10, [](int i, double) { return i < 3; }));
  const HeldoutRow best = realised(role("best", 10, [](int i, double) { return i < 6; }));
  const nlohmann::json stats = heldout_statistics({baseline, best}, HeldoutStatisticsOptions{});
  for (const nlohmann::json* positions : {&stats["intervals"][0]["positions"], &stats["comparisons"][0]["positions"]}) {
    ASSERT_EQ(positions->size(), 3u) << positions->dump();
    EXPECT_EQ((*positions)[1]["position"], 0.5) << positions->dump();
    EXPECT_DOUBLE_EQ((*positions)[1]["realised_position"].get<double>(), 5.0 / 9.0);
    EXPECT_FALSE((*positions)[0].contains("realised_position"));
    EXPECT_FALSE((*positions)[2].contains("realised_position"));
  }
  EXPECT_EQ(stats["comparisons"][0]["middle"]["positions"], nlohmann::json::array({0.5}));
}

}  // namespace
}  // namespace midtune
