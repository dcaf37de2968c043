// Every operator emits valid genomes only; the LPES mutation keeps the
// eq. 9 clamps and eq. 10 monotonicity over many random draws.
#include <algorithm>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "core/ga/lpes_space.hpp"
#include "core/ga/operators.hpp"
#include "core/ga/selection.hpp"

namespace midtune {
namespace {

constexpr int kDraws = 3000;

GenomeSpace mixed_space() {
  return GenomeSpace({IntGene{"layer", 0, 9}, FloatGene{"ratio", 1.0, 2.0, 0.1},
                      FloatGene{"gap", 0.0, 1000.0, 50.0},
                      CategoricalGene{"kind", {"moses", "hourglass", "decay"}}},
                     [](const Genome& g) { return g[0] + g[1] <= 10.0; }, "layer + ratio <= 10");
}

TEST(LpesMutation, KeepsEquationNineClampsAndEquationTenOrder) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  MutationConfig config;  // lpes, M_x 2, M_y 0.2
  Rng rng(11);
  Genome parent = *space.seed();
  int max_dx_seen = 0;
  double max_dy_seen = 0.0;
  std::set<Genome> distinct;
  for (int draw = 0; draw < kDraws; ++draw) {
    const Genome child = lpes_mutate(space, parent, config, rng);
    ASSERT_TRUE(space.is_valid(child)) << space.why_invalid(child);
    for (int k = 0; k <= 3; ++k) {
      const double x = child[2 * k];
      const double y = child[2 * k + 1];
      const double left = k == 0 ? 0.0 : parent[2 * (k - 1)];
      const double right = k == 3 ? 31.0 : parent[2 * (k + 1)];
      // LPES eq. 9, neighbours from the parent.
      ASSERT_GE(x, std::max(left, parent[2 * k] - config.max_dx));
      ASSERT_LE(x, std::min(right, parent[2 * k] + config.max_dx));
      ASSERT_GE(y, std::max(1.0, parent[2 * k + 1] - config.max_dy) - 1e-12);
      ASSERT_LE(y, std::min(2.0, parent[2 * k + 1] + config.max_dy) + 1e-12);
      if (k > 0) {
        ASSERT_LT(child[2 * (k - 1)], x);  // eq. 10
      }
      max_dx_seen = std::max(max_dx_seen, static_cast<int>(std::abs(x - parent[2 * k])));
      max_dy_seen = std::max(max_dy_seen, std::abs(y - parent[2 * k + 1]));
    }
    distinct.insert(child);
    if (draw % 10 == 0) parent = child;  // walk, so edges and crowded points occur
  }
  EXPECT_EQ(max_dx_seen, 2);  // the whole ±M_x range is reachable
  EXPECT_NEAR(max_dy_seen, 0.2, 1e-9);
  EXPECT_GT(distinct.size(), 500u);
}

TEST(LpesMutation, CrowdedPointsStayStrictlyIncreasing) {
  LpesSpec spec;
  spec.degree = 6;
  spec.grid.layers = 8;  // 7 points on 8 x values: hardly any room to move
  const GenomeSpace space = lpes_genome_space(spec);
  MutationConfig config;
  Rng rng(12);
  const Genome parent{0, 1.0, 1, 2.0, 2, 1.0, 3, 2.0, 5, 1.0, 6, 2.0, 7, 1.0};
  ASSERT_TRUE(space.is_valid(parent));
  // Few draws: most redraw loops here run to max_tries before a valid child.
  for (int draw = 0; draw < 100; ++draw) {
    const Genome child = lpes_mutate(space, parent, config, rng);
    ASSERT_TRUE(space.is_valid(child)) << space.why_invalid(child);
  }
}

TEST(LpesMutation, NeedsAControlPointSpace) {
  Rng rng(1);
  const GenomeSpace space = mixed_space();
  EXPECT_THROW(lpes_mutate(space, {1, 1.0, 0, 0}, MutationConfig{}, rng), std::invalid_argument);
}

TEST(GenericMutations, AlwaysValidAndActuallyMove) {
  const GenomeSpace space = mixed_space();
  for (MutationKind kind : {MutationKind::uniform, MutationKind::gaussian, MutationKind::polynomial}) {
    MutationConfig config;
    config.kind = kind;
    config.rate = 0.5;
    Rng rng(13);
    Genome parent{8, 2.0, 1000, 0};  // on the predicate's edge and the ranges' ends
    std::set<Genome> distinct;
    for (int draw = 0; draw < kDraws; ++draw) {
      const Genome child = mutate(space, parent, config, rng);
      ASSERT_TRUE(space.is_valid(child)) << to_string(kind) << ": " << space.why_invalid(child);
      distinct.insert(child);
      if (draw % 7 == 0) parent = child;
    }
    EXPECT_GT(distinct.size(), 50u) << to_string(kind);
  }
}

// At the default rate (1/n per gene) about a third of draws would change no
// gene; such a mutant is a wasted candidate (a cache hit), so one gene moves.
TEST(GenericMutations, AMutantDiffersFromItsParentAtTheDefaultRate) {
  const GenomeSpace space = mixed_space();
  for (MutationKind kind : {MutationKind::uniform, MutationKind::gaussian, MutationKind::polynomial}) {
    MutationConfig config;
    config.kind = kind;  // rate unset: 1 / genes
    Rng rng(21);
    const Genome parent{4, 1.5, 500, 1};
    int unchanged = 0;
    for (int draw = 0; draw < kDraws; ++draw) unchanged += mutate(space, parent, config, rng) == parent;
    EXPECT_LT(unchanged, kDraws / 100) << to_string(kind);
  }
}

TEST(GenericMutations, ReturnsTheParentWhenNothingValidCanBeDrawn) {
  const Genome only{3, 1.5, 100, 1};
  const GenomeSpace space({IntGene{"layer", 0, 9}, FloatGene{"ratio", 1.0, 2.0, 0.1},
                           FloatGene{"gap", 0.0, 1000.0, 50.0}, CategoricalGene{"kind", {"a", "b"}}},
                          [only](const Genome& g) { return g == only; }, "exactly one genome");
  MutationConfig config;
  config.kind = MutationKind::uniform;
  config.rate = 1.0;
  config.max_tries = 20;
  Rng rng(14);
  EXPECT_EQ(mutate(space, only, config, rng), only);
  EXPECT_THROW(mutate(space, {3, 1.55, 100, 1}, config, rng), std::invalid_argument);  // invalid parent
}

TEST(Crossover, OnePointSwapsTails) {
  Rng rng(15);
  const Genome a{1, 2, 3, 4, 5};
  const Genome b{-1, -2, -3, -4, -5};
  std::set<int> cuts;
  for (int draw = 0; draw < 500; ++draw) {
    const auto children = one_point_crossover(a, b, rng);
    ASSERT_EQ(children.size(), 2u);
    int cut = 0;
    while (cut < 5 && children[0][cut] == a[cut]) ++cut;
    ASSERT_GE(cut, 1);
    ASSERT_LE(cut, 4);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(children[0][i], i < cut ? a[i] : b[i]);
      EXPECT_EQ(children[1][i], i < cut ? b[i] : a[i]);
    }
    cuts.insert(cut);
  }
  EXPECT_EQ(cuts.size(), 4u);
}

TEST(Crossover, EveryKindEmitsOnlyValidChildren) {
  const GenomeSpace mixed = mixed_space();
  const GenomeSpace lpes = lpes_genome_space(LpesSpec{});
  for (CrossoverKind kind : {CrossoverKind::one_point, CrossoverKind::uniform, CrossoverKind::sbx}) {
    for (const GenomeSpace* space : {&mixed, &lpes}) {
      CrossoverConfig config;
      config.kind = kind;
      Rng rng(16);
      int produced = 0;
      for (int draw = 0; draw < kDraws / 3; ++draw) {
        const Genome a = space->random_genome(rng);
        const Genome b = space->random_genome(rng);
        const auto children = crossover(*space, a, b, config, rng);
        ASSERT_LE(children.size(), 2u);
        for (const Genome& child : children) {
          ASSERT_TRUE(space->is_valid(child)) << to_string(kind) << ": " << space->why_invalid(child);
        }
        produced += static_cast<int>(children.size());
      }
      EXPECT_GT(produced, kDraws / 3) << to_string(kind);
    }
  }
}

TEST(Crossover, GivesUpAfterMaxTries) {
  const Genome a{0, 1.0, 10, 1.0, 20, 1.0, 30, 1.0};
  const Genome b{1, 2.0, 11, 2.0, 21, 2.0, 31, 2.0};
  const GenomeSpace lpes = lpes_genome_space(LpesSpec{});
  // Only the two parents are allowed: every recombination is a mix, so invalid.
  const GenomeSpace space(lpes.genes(), [&](const Genome& g) { return g == a || g == b; }, "parents only");
  CrossoverConfig config;
  config.max_tries = 4;
  Rng rng(17);
  EXPECT_TRUE(crossover(space, a, b, config, rng).empty());
}

TEST(Selection, TruncationTakesTheBestAndBreaksTiesByPosition) {
  const std::vector<double> fitness{0.5, 0.9, 0.1, 0.9, -INFINITY, 0.7};
  EXPECT_EQ(truncation_select(fitness, 3), (std::vector<std::size_t>{1, 3, 5}));
  EXPECT_EQ(truncation_select(fitness, 10).size(), 6u);
  EXPECT_EQ(elites(fitness, 1), (std::vector<std::size_t>{1}));
}

TEST(Selection, TournamentFavoursTheFit) {
  const std::vector<double> fitness{0.1, 0.2, 0.3, 0.4, 0.5};
  Rng rng(18);
  const auto large = tournament_select(fitness, 50, 50, rng);
  for (std::size_t winner : large) EXPECT_EQ(winner, 4u);  // 50 entrants: the best is drawn
  const auto winners = tournament_select(fitness, 5000, 2, rng);
  std::vector<int> counts(5, 0);
  for (std::size_t winner : winners) ++counts[winner];
  EXPECT_LT(counts[0], counts[4]);  // P(worst wins) = 1/25, P(best wins) = 9/25
  Rng again(18);
  tournament_select(fitness, 50, 50, again);
  EXPECT_EQ(tournament_select(fitness, 5000, 2, again), winners);
}

TEST(OperatorConfig, JsonAndValidation) {
  const auto mutation = nlohmann::json{{"kind", "gaussian"}, {"sigma", 0.2}}.get<MutationConfig>();
  EXPECT_EQ(mutation.kind, MutationKind::gaussian);
  EXPECT_EQ(nlohmann::json(mutation).get<MutationConfig>(), mutation);
  EXPECT_THROW((nlohmann::json{{"kind", "cauchy"}}.get<MutationConfig>()), std::invalid_argument);
  EXPECT_THROW((nlohmann::json{{"rate", 2}}.get<MutationConfig>()), std::invalid_argument);
  const auto cross = nlohmann::json{{"kind", "sbx"}, {"N_ct", 6}}.get<CrossoverConfig>();
  EXPECT_EQ(cross.max_tries, 6);
  EXPECT_THROW((nlohmann::json{{"tries", 6}}.get<CrossoverConfig>()), std::invalid_argument);
}

}  // namespace
}  // namespace midtune
