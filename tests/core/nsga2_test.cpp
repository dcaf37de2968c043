// nsga2: non-dominated sorting and crowding distance worked by hand, a
// search that must find the Pareto set of a known two-objective problem, and
// exact resume from a saved state.
#include "core/ga/nsga2.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "core/ga/factory.hpp"

namespace midtune {
namespace {

TEST(Nsga2Sort, FrontsByHand) {
  //                      0       1       2       3       4       5
  const std::vector<std::vector<double>> points = {{1, 5}, {2, 4}, {3, 3}, {2, 2}, {1, 1}, {3, 3}};
  const auto fronts = non_dominated_fronts(points);
  ASSERT_EQ(fronts.size(), 3u);
  EXPECT_EQ(fronts[0], (std::vector<std::size_t>{0, 1, 2, 5}));  // equal points do not dominate each other
  EXPECT_EQ(fronts[1], (std::vector<std::size_t>{3}));
  EXPECT_EQ(fronts[2], (std::vector<std::size_t>{4}));
}

TEST(Nsga2Sort, CrowdingByHand) {
  const std::vector<std::vector<double>> points = {{2, 4}, {1, 5}, {3, 3}, {1.5, 4.75}};
  const std::vector<double> d = crowding_distance(points, {0, 1, 2, 3});
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(d[1], inf);  // extremes of both objectives
  EXPECT_EQ(d[2], inf);
  // (2, 4): neighbours (1.5, 4.75) and (3, 3): 1.5/2 + 1.75/2.
  EXPECT_DOUBLE_EQ(d[0], 1.5 / 2 + 1.75 / 2);
  // (1.5, 4.75): neighbours (1, 5) and (2, 4): 1/2 + 1/2.
  EXPECT_DOUBLE_EQ(d[3], 0.5 + 0.5);
}

GenomeSpace unit_square() { return GenomeSpace({FloatGene{"x", 0.0, 1.0, 0.01}, FloatGene{"y", 0.0, 1.0, 0.01}}); }

// max x - y and max (1 - x^2) - y: the Pareto set is y = 0, every x.
std::vector<std::vector<double>> score(const std::vector<Candidate>& batch) {
  std::vector<std::vector<double>> out;
  for (const Candidate& c : batch) out.push_back({c.genome[0] - c.genome[1], 1.0 - c.genome[0] * c.genome[0] - c.genome[1]});
  return out;
}

Nsga2Config small_config() {
  Nsga2Config config;
  config.population_size = 20;
  config.generations = 25;
  return config;
}

TEST(Nsga2Strategy, FindsTheParetoSetOfAKnownProblem) {
  Nsga2Strategy strategy(unit_square(), small_config(), 11);
  std::map<std::int64_t, Genome> genomes;
  while (!strategy.done()) {
    const auto batch = strategy.ask();
    for (const Candidate& c : batch) genomes[c.id] = c.genome;
    strategy.tell_objectives(score(batch));
  }
  const auto front = strategy.front();
  ASSERT_GE(front.size(), 10u);
  double worst_y = 0.0, low_x = 1.0, high_x = 0.0;
  for (std::int64_t id : front) {
    worst_y = std::max(worst_y, genomes[id][1]);
    low_x = std::min(low_x, genomes[id][0]);
    high_x = std::max(high_x, genomes[id][0]);
  }
  EXPECT_LE(worst_y, 0.05);              // on (or next to) the Pareto set
  EXPECT_GE(high_x - low_x, 0.5);        // and spread along it (crowding)
}

TEST(Nsga2Strategy, ResumesExactlyFromASavedState) {
  Nsga2Strategy whole(unit_square(), small_config(), 5);
  std::vector<std::vector<Candidate>> whole_batches;
  while (!whole.done()) {
    whole_batches.push_back(whole.ask());
    whole.tell_objectives(score(whole_batches.back()));
  }

  Nsga2Strategy first(unit_square(), small_config(), 5);
  std::vector<std::vector<Candidate>> resumed_batches;
  for (int g = 0; g < 7; ++g) {
    resumed_batches.push_back(first.ask());
    first.tell_objectives(score(resumed_batches.back()));
  }
  first.ask();  // a pending batch is part of the state too
  const nlohmann::json saved = first.save_state();
  Nsga2Strategy second(unit_square(), small_config(), 999);  // the seed is overwritten by the state
  second.load_state(nlohmann::json::parse(saved.dump()));
  while (!second.done()) {
    resumed_batches.push_back(second.ask());
    second.tell_objectives(score(resumed_batches.back()));
  }
  ASSERT_EQ(resumed_batches.size(), whole_batches.size());
  for (std::size_t g = 0; g < whole_batches.size(); ++g) {
    ASSERT_EQ(resumed_batches[g].size(), whole_batches[g].size());
    for (std::size_t i = 0; i < whole_batches[g].size(); ++i) {
      EXPECT_EQ(resumed_batches[g][i].id, whole_batches[g][i].id);
      EXPECT_EQ(resumed_batches[g][i].genome, whole_batches[g][i].genome);
      EXPECT_EQ(resumed_batches[g][i].parents, whole_batches[g][i].parents);
    }
  }
  EXPECT_EQ(second.front(), whole.front());
  EXPECT_EQ(second.population(), whole.population());
}

TEST(Nsga2Strategy, AskTwiceGivesTheSameBatchAndBadTellsAreRefused) {
  Nsga2Strategy strategy(unit_square(), small_config(), 3);
  const auto a = strategy.ask();
  const auto b = strategy.ask();
  ASSERT_EQ(a.size(), 20u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].genome, b[i].genome);
  EXPECT_THROW(strategy.tell(std::vector<double>(20, 0.0)), std::logic_error);
  EXPECT_THROW(strategy.tell_objectives(std::vector<std::vector<double>>(19, {0.0, 0.0})), std::invalid_argument);
  EXPECT_THROW(strategy.tell_objectives(std::vector<std::vector<double>>(20, {0.0})), std::invalid_argument);
  EXPECT_THROW(strategy.tell_objectives(std::vector<std::vector<double>>(20, {0.0, std::nan("")})),
               std::invalid_argument);
}

TEST(Nsga2Strategy, ConfigurationErrorsNameTheField) {
  try {
    make_strategy(unit_square(), {{"kind", "nsga2"}, {"objectives", 4}}, 1);
    FAIL() << "4 objectives accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nsga2.objectives"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_strategy(unit_square(), {{"kind", "nsga2"}, {"populaton_size", 4}}, 1), std::invalid_argument);
  const auto made = make_strategy(unit_square(), {{"kind", "nsga2"}, {"population_size", 8}, {"generations", 2}}, 1);
  EXPECT_EQ(made->objectives(), 2);
  EXPECT_EQ(made->ask().size(), 8u);
}

TEST(StrategyObjectives, ScalarStrategiesTakeOneObjectiveThroughTheVectorTell) {
  const auto random = make_strategy(unit_square(), {{"kind", "random"}, {"count", 4}, {"batch_size", 4}}, 1);
  EXPECT_EQ(random->objectives(), 1);
  random->ask();
  EXPECT_THROW(random->tell_objectives(std::vector<std::vector<double>>(4, {1.0, 2.0})), std::invalid_argument);
  random->tell_objectives(std::vector<std::vector<double>>(4, {1.0}));
  EXPECT_TRUE(random->done());
}

}  // namespace
}  // namespace midtune
