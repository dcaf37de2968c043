// GenomeSpace grids, validity, JSON form; the LPES spaces built on it; the RNG.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "core/ga/genome.hpp"
#include "core/ga/lpes_space.hpp"
#include "core/ga/rng.hpp"

namespace midtune {
namespace {

GenomeSpace mixed_space() {
  return GenomeSpace({IntGene{"layer", 0, 9}, FloatGene{"ratio", 1.0, 2.0, 0.1},
                      CategoricalGene{"kind", {"moses", "hourglass", "decay"}}},
                     [](const Genome& g) { return g[0] + g[1] <= 10.0; }, "layer + ratio <= 10");
}

TEST(Gene, FloatGridValuesAreTheirDecimals) {
  const Gene gene = FloatGene{"y", 1.0, 2.0, 0.1};
  EXPECT_EQ(grid_size(gene), 11);
  EXPECT_EQ(grid_value(gene, 1), 1.1);  // not 1.1000000000000001
  EXPECT_EQ(grid_value(gene, 3), 1.3);
  EXPECT_EQ(grid_value(gene, 10), 2.0);
  EXPECT_EQ(snap(gene, 1.149), 1.1);
  EXPECT_EQ(snap(gene, 7.0), 2.0);
  EXPECT_EQ(snap(gene, -3.0), 1.0);
  EXPECT_TRUE(on_grid(gene, 1.0 + 3 * 0.1));
  EXPECT_FALSE(on_grid(gene, 1.05));
  EXPECT_FALSE(on_grid(gene, 2.1));
  EXPECT_THROW(snap(gene, NAN), std::invalid_argument);
}

TEST(Gene, IntAndCategoricalGrids) {
  const Gene layer = IntGene{"layer", -2, 5};
  EXPECT_EQ(grid_size(layer), 8);
  EXPECT_EQ(snap(layer, 2.4), 2.0);
  EXPECT_EQ(snap(layer, 99), 5.0);
  EXPECT_FALSE(on_grid(layer, 2.5));
  const Gene kind = CategoricalGene{"kind", {"a", "b"}};
  EXPECT_EQ(grid_size(kind), 2);
  EXPECT_EQ(snap(kind, 7), 1.0);
  EXPECT_TRUE(on_grid(kind, 0.0));
}

TEST(Gene, JsonRoundTripAndErrors) {
  const GenomeSpace space = mixed_space();
  for (const Gene& gene : space.genes()) {
    const Gene back = gene_from_json(gene_to_json(gene));
    EXPECT_EQ(gene_to_json(back), gene_to_json(gene));
  }
  EXPECT_THROW(gene_from_json({{"name", "a"}, {"type", "float"}, {"lo", 0}, {"hi", 1}}), std::invalid_argument);
  EXPECT_THROW(gene_from_json({{"name", "a"}, {"type", "bool"}}), std::invalid_argument);
  EXPECT_THROW(gene_from_json({{"name", "a"}, {"type", "int"}, {"lo", 3}, {"hi", 1}}), std::invalid_argument);
  EXPECT_THROW(gene_from_json({{"name", "a"}, {"type", "categorical"}, {"values", {"x", "x"}}}),
               std::invalid_argument);
}

TEST(GenomeSpace, LookupByName) {
  const GenomeSpace space = mixed_space();
  EXPECT_EQ(space.index_of("ratio"), 1u);
  EXPECT_EQ(gene_name(space.gene("kind")), "kind");
  EXPECT_FALSE(space.find("nope"));
  EXPECT_THROW(space.index_of("nope"), std::invalid_argument);
  EXPECT_THROW(GenomeSpace({IntGene{"a", 0, 1}, IntGene{"a", 0, 2}}), std::invalid_argument);
}

TEST(GenomeSpace, ValidityNamesTheReason) {
  const GenomeSpace space = mixed_space();
  EXPECT_TRUE(space.is_valid({3, 1.5, 2}));
  EXPECT_NE(space.why_invalid({3, 1.55, 2}).find("ratio"), std::string::npos);
  EXPECT_NE(space.why_invalid({3, 1.5, 3}).find("kind"), std::string::npos);
  EXPECT_NE(space.why_invalid({9, 1.5, 0}).find("layer + ratio <= 10"), std::string::npos);
  EXPECT_NE(space.why_invalid({3, 1.5}).find("2 values"), std::string::npos);
  EXPECT_FALSE(space.is_valid({3, INFINITY, 0}));
  EXPECT_EQ(space.snap({3.4, 1.53, 5}), (Genome{3, 1.5, 2}));
}

TEST(GenomeSpace, JsonFormKeyedByGeneNames) {
  const GenomeSpace space = mixed_space();
  const Genome genome{4, 1.3, 1};
  const nlohmann::json json = space.to_json(genome);
  EXPECT_EQ(json, (nlohmann::json{{"layer", 4}, {"ratio", 1.3}, {"kind", "hourglass"}}));
  EXPECT_EQ(space.from_json(json), genome);
  EXPECT_EQ(space.from_json(nlohmann::json::parse(json.dump())), genome);
  auto rejects = [&](nlohmann::json bad, const std::string& word) {
    try {
      space.from_json(bad);
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(word), std::string::npos) << error.what();
    }
  };
  rejects({{"layer", 4}, {"ratio", 1.3}}, "kind");
  rejects({{"layer", 4}, {"ratio", 1.35}, {"kind", "decay"}}, "ratio");
  rejects({{"layer", 4}, {"ratio", 1.3}, {"kind", "linear"}}, "kind");
  rejects({{"layer", 4}, {"ratio", 1.3}, {"kind", "decay"}, {"extra", 1}}, "extra");
  rejects({{"layer", 9}, {"ratio", 1.3}, {"kind", "decay"}}, "constraint");
}

TEST(GenomeSpace, RandomGenomesAreValidAndCoverTheGrid) {
  const GenomeSpace space = mixed_space();
  Rng rng(5);
  std::set<double> ratios;
  for (int draw = 0; draw < 2000; ++draw) {
    const Genome genome = space.random_genome(rng);
    ASSERT_TRUE(space.is_valid(genome)) << space.why_invalid(genome);
    ratios.insert(genome[1]);
  }
  EXPECT_EQ(ratios.size(), 11u);
  const GenomeSpace impossible({IntGene{"a", 0, 3}}, [](const Genome&) { return false; }, "never");
  EXPECT_THROW(impossible.random_genome(rng, 50), std::runtime_error);
}

TEST(LpesSpace, PaperSpaceAndEquationEightSeed) {
  LpesSpec spec;  // bezier, D = 3, L = 32, x step 1, y in [1, 2] step 0.1
  const GenomeSpace space = lpes_genome_space(spec);
  EXPECT_EQ(space.names(), (std::vector<std::string>{"x0", "y0", "x1", "y1", "x2", "y2", "x3", "y3"}));
  ASSERT_TRUE(space.control_points());
  EXPECT_EQ(space.control_points()->degree, 3);
  // (k(L-1)/D, 1.5): x = 0, 10.33, 20.67, 31 rounded to the integer grid.
  const Genome expected{0, 1.5, 10, 1.5, 21, 1.5, 31, 1.5};
  EXPECT_EQ(*space.seed(), expected);
  EXPECT_EQ(lpes_initial_genome(spec), expected);
  EXPECT_TRUE(std::holds_alternative<IntGene>(space.gene("x2")));
  EXPECT_FALSE(space.is_valid({0, 1.5, 10, 1.5, 10, 1.5, 31, 1.5}));  // eq. 10: strict
  EXPECT_FALSE(space.is_valid({0, 1.5, 10, 1.5, 32, 1.5, 31, 1.5}));
  for (double s : lpes_layer_scales(spec, expected)) EXPECT_NEAR(s, 1.5, 1e-12);
  const auto scales = lpes_layer_scales(spec, {0, 1.0, 10, 1.0, 21, 2.0, 31, 2.0});
  ASSERT_EQ(scales.size(), 32u);
  EXPECT_DOUBLE_EQ(scales.front(), 1.0);
  EXPECT_DOUBLE_EQ(scales.back(), 2.0);
}

TEST(LpesSpace, DegreesAndCurveKinds) {
  for (int degree = 1; degree <= 6; ++degree) {
    LpesSpec spec;
    spec.degree = degree;
    spec.curve = degree % 2 ? bezier::CurveKind::linear : bezier::CurveKind::step;
    const GenomeSpace space = lpes_genome_space(spec);
    EXPECT_EQ(space.size(), 2u * (degree + 1));
    EXPECT_TRUE(space.is_valid(*space.seed()));
    EXPECT_EQ(lpes_layer_scales(spec, *space.seed()).size(), 32u);
  }
  LpesSpec too_high;
  too_high.degree = 7;
  EXPECT_THROW(lpes_genome_space(too_high), std::invalid_argument);
  LpesSpec too_few_layers;
  too_few_layers.grid.layers = 3;  // 3 x values cannot hold 4 strictly increasing points
  EXPECT_THROW(lpes_genome_space(too_few_layers), std::invalid_argument);
}

TEST(LpesSpace, BruteForceHasOneScalePerLayer) {
  LpesSpec spec;
  spec.curve = bezier::CurveKind::brute_force;
  spec.grid.layers = 30;
  const GenomeSpace space = lpes_genome_space(spec);
  EXPECT_EQ(space.size(), 30u);
  EXPECT_EQ(space.names().back(), "s29");
  EXPECT_FALSE(space.control_points());
  Genome genome = *space.seed();
  genome[4] = 1.9;
  EXPECT_EQ(lpes_layer_scales(spec, genome), genome);
  EXPECT_THROW(lpes_layer_scales(spec, Genome(29, 1.5)), std::invalid_argument);
}

TEST(LpesSpace, SpecJson) {
  const LpesSpec spec = nlohmann::json{{"curve", "linear"}, {"degree", 2}, {"grid", {{"layers", 24}}}}.get<LpesSpec>();
  EXPECT_EQ(spec.curve, bezier::CurveKind::linear);
  EXPECT_EQ(spec.grid.layers, 24);
  EXPECT_EQ(nlohmann::json(spec).get<LpesSpec>(), spec);
  EXPECT_THROW((nlohmann::json{{"curve", "spline"}}.get<LpesSpec>()), std::invalid_argument);
  EXPECT_THROW((nlohmann::json{{"degre", 2}}.get<LpesSpec>()), std::invalid_argument);
}

TEST(Rng, DeterministicAndRestorable) {
  Rng a(42);
  Rng b(42);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  const nlohmann::json saved = nlohmann::json::parse(a.save().dump());
  std::vector<double> expected;
  for (int i = 0; i < 20; ++i) expected.push_back(a.normal() + a.uniform01() + a.uniform_int(-3, 3));
  Rng restored(7);
  restored.load(saved);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(restored.normal() + restored.uniform01() + restored.uniform_int(-3, 3), expected[i]);
  }
  EXPECT_THROW(restored.load({{"engine", "mt19937_64"}, {"state", "12 nonsense"}}), std::invalid_argument);
  EXPECT_THROW(restored.load({{"engine", "pcg"}}), std::invalid_argument);
}

TEST(Rng, KnownFirstDrawOfTheStandardEngine) {
  // std::mt19937_64 is fully specified: its 10000th output from the default
  // seed is 9981545732273789042 (C++ standard [rand.predef]).
  Rng rng(5489u);
  std::uint64_t value = 0;
  for (int i = 0; i < 10000; ++i) value = rng.next_u64();
  EXPECT_EQ(value, 9981545732273789042ull);
}

TEST(Rng, UniformIntCoversItsRangeEvenly) {
  Rng rng(9);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    const auto value = rng.uniform_int(-3, 3);
    ASSERT_GE(value, -3);
    ASSERT_LE(value, 3);
    ++counts[static_cast<std::size_t>(value + 3)];
  }
  for (int count : counts) EXPECT_NEAR(count, 10000, 500);
  double sum = 0.0, squares = 0.0;
  for (int i = 0; i < 20000; ++i) {
    const double z = rng.normal();
    sum += z;
    squares += z * z;
  }
  EXPECT_NEAR(sum / 20000, 0.0, 0.05);
  EXPECT_NEAR(squares / 20000, 1.0, 0.05);
  EXPECT_THROW(rng.uniform_int(2, 1), std::invalid_argument);
}

}  // namespace
}  // namespace midtune
