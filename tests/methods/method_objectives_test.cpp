// The Ms-PoE, SIW, CALIOPE and PHS objectives: genes from the experiment file (paper defaults as
// the start), genome -> Intervention, ordering constraints, combo genomes.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>

#include "core/experiment/experiment.hpp"
#include "methods/phs.hpp"
#include "objectives/objective.hpp"

namespace midtune {
namespace {

Experiment parse(const std::string& objective_yaml) {
  const std::string text =
      "name: t\nseed: 1\nbackend: {kind: synthetic-test-double, layers: 30, heads: 9}\n"
      "dataset: {kind: kv, pairs: 10}\n" + objective_yaml + "search: {strategy: random}\n";
  return parse_experiment(text, "/tmp/methods-test.yaml");
}

TEST(MethodObjectives, MsPoeStartsAtThePaperDefaults) {
  const Experiment e = parse(
      "objective:\n  kind: mspoe\n  mspoe:\n    genes:\n"
      "      min_ratio: {min: 1.0, max: 1.6, step: 0.1}\n"
      "      max_ratio: {min: 1.6, max: 2.4, step: 0.2}\n"
      "      order: {values: [awareness, sequential]}\n");
  const auto objective = make_objective(e.objective, 30);
  EXPECT_EQ(objective->name(), "mspoe");
  EXPECT_EQ(objective->space().names(), (std::vector<std::string>{"min_ratio", "max_ratio", "order"}));
  const Intervention start = objective->decode(objective->initial_genome());
  ASSERT_TRUE(start.mspoe);
  EXPECT_DOUBLE_EQ(start.mspoe->min_ratio, 1.2);
  EXPECT_DOUBLE_EQ(start.mspoe->max_ratio, 1.8);
  EXPECT_DOUBLE_EQ(start.mspoe->alpha, 3.0);   // fixed at the paper default
  EXPECT_EQ(start.mspoe->first_layer, 2);
  EXPECT_EQ(start.mspoe->order, "awareness");
  const Intervention other = objective->decode({1.5, 2.0, 1});
  EXPECT_DOUBLE_EQ(other.mspoe->min_ratio, 1.5);
  EXPECT_EQ(other.mspoe->order, "sequential");
  EXPECT_FALSE(objective->space().is_valid({1.7, 2.0, 0})) << "1.7 is outside min_ratio's range";
}

TEST(MethodObjectives, SiwLayersBecomeARange) {
  const Experiment e = parse(
      "objective:\n  kind: siw\n  siw:\n    genes:\n"
      "      alpha_dense: {min: 0.2, max: 1.0, step: 0.2, start: 0.6}\n"
      "      alpha_sparse: {min: 1.0, max: 2.0, step: 0.25}\n"
      "      first_layer: {min: 4, max: 12, step: 4, start: 4}\n"
      "      last_layer: {min: 12, max: 24, step: 4, start: 12}\n");
  const auto objective = make_objective(e.objective, 30);
  const Intervention iv = objective->decode({0.4, 1.5, 8, 16});
  ASSERT_TRUE(iv.siw);
  EXPECT_DOUBLE_EQ(iv.siw->alpha_dense, 0.4);
  EXPECT_DOUBLE_EQ(iv.siw->alpha_sparse, 1.5);
  EXPECT_DOUBLE_EQ(iv.siw->sigma, 1.0);
  EXPECT_EQ(iv.siw->layers, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(objective->initial_genome(), (Genome{0.6, 1.0, 4, 12}));
  EXPECT_TRUE(objective->space().is_valid({0.4, 1.5, 12, 12}));
  EXPECT_THROW(make_objective(e.objective, 20), std::invalid_argument) << "last_layer 24 beyond 20 layers";
}

TEST(MethodObjectives, CaliopeCalibratorIsCategorical) {
  const Experiment e = parse(
      "objective:\n  kind: caliope\n  caliope:\n    genes:\n"
      "      calibrator: {values: [moses, hourglass, decay]}\n"
      "      gap: {values: [100, 1000, 10000]}\n"
      "      lambda: {min: 0.5, max: 0.95, step: 0.05}\n");
  const auto objective = make_objective(e.objective, 30);
  const Intervention start = objective->decode(objective->initial_genome());
  ASSERT_TRUE(start.position_map);
  EXPECT_EQ(start.position_map->kind, "moses");
  EXPECT_DOUBLE_EQ(start.position_map->gap, 10000);
  const Intervention decay = objective->decode({2, 0, 0.5});
  EXPECT_EQ(decay.position_map->kind, "decay");
  EXPECT_DOUBLE_EQ(decay.position_map->lambda, 0.5);
  EXPECT_DOUBLE_EQ(decay.position_map->delta0, 1000);
}

TEST(MethodObjectives, PhsNeedsItsChannel) {
  const Experiment e = parse(
      "objective:\n  kind: phs\n  phs:\n    genes:\n"
      "      channel: {values: [17, 300], start: 17}\n"
      "      scale: {values: [0.5, 0, -0.5, -1]}\n"
      "      first_layer: 8\n      last_layer: 20\n");
  const auto objective = make_objective(e.objective, 30);
  const Intervention iv = objective->decode({1, 3});
  ASSERT_TRUE(iv.hidden_channel);
  EXPECT_EQ(iv.hidden_channel->channel, 300);
  EXPECT_DOUBLE_EQ(iv.hidden_channel->scale, -1);
  EXPECT_EQ(iv.hidden_channel->layers.size(), 13u);
  EXPECT_EQ(objective->decode(objective->initial_genome()).hidden_channel->scale, 0.0);
}

// Wide models: Qwen2.5-1.5B's hidden state has 1,536 channels, a 7B's 3,584;
// the file's channels past 1,023 are taken (the model's own size is checked
// when the model is known).
TEST(MethodObjectives, PhsTakesChannelsOfWideModels) {
  const Experiment e = parse(
      "objective:\n  kind: phs\n  phs:\n    genes:\n"
      "      channel: {values: [752, 1073, 3583], start: 752}\n"
      "      first_layer: 9\n      last_layer: 22\n");
  const auto objective = make_objective(e.objective, 28);
  EXPECT_EQ(objective->decode({2}).hidden_channel->channel, 3583);
}

TEST(MethodObjectives, ComboJoinsLpesAndSiw) {
  const Experiment e = parse(
      "objective:\n  kind: combo\n  combo: {methods: [lpes, siw]}\n"
      "  lpes: {curve: bezier, degree: 3}\n"
      "  siw:\n    genes:\n"
      "      alpha_dense: {min: 0.2, max: 1.0, step: 0.2, start: 0.6}\n"
      "      alpha_sparse: {min: 1.0, max: 2.0, step: 0.25}\n"
      "      first_layer: 8\n      last_layer: 20\n");
  const auto objective = make_objective(e.objective, 30);
  const auto names = objective->space().names();
  ASSERT_EQ(names.size(), 10u);
  EXPECT_EQ(names[0], "lpes.x0");
  EXPECT_EQ(names[8], "siw.alpha_dense");
  const Intervention iv = objective->decode(objective->initial_genome());
  EXPECT_EQ(iv.rope_scale.size(), 30u);
  ASSERT_TRUE(iv.siw);
  EXPECT_DOUBLE_EQ(iv.siw->alpha_dense, 0.6);
  Genome bad = objective->initial_genome();
  std::swap(bad[0], bad[2]);  // LPES x must increase
  EXPECT_FALSE(objective->space().is_valid(bad));
}

// The held-out step compares a search's best with the method as its paper
// sets it: paper values even outside the searched range, the experiment's
// start where the paper gives none, and no paper default for LPES / PI or
// for a method whose paper gives no setting (SIW, attention temperature:
// their defaults are the plain model, which the baseline row already is).
TEST(MethodObjectives, PaperDefaultUsesThePapersValuesEvenOutsideTheSearchedRange) {
  const Experiment mspoe = parse(
      "objective:\n  kind: mspoe\n  mspoe:\n    genes:\n"
      "      min_ratio: {values: [1.4, 1.5], start: 1.4}\n      max_ratio: {values: [2.0, 2.2], start: 2.0}\n"
      "      alpha: 5\n      order: {values: [sequential, random], start: sequential}\n");
  const auto paper = make_objective(mspoe.objective, 30)->paper_default();
  ASSERT_TRUE(paper && paper->mspoe);
  EXPECT_DOUBLE_EQ(paper->mspoe->min_ratio, 1.2);
  EXPECT_DOUBLE_EQ(paper->mspoe->max_ratio, 1.8);
  EXPECT_DOUBLE_EQ(paper->mspoe->alpha, 3.0);
  EXPECT_EQ(paper->mspoe->order, "awareness");

  const std::string siw_genes =
      "  siw:\n    genes:\n"
      "      alpha_dense: {min: 0.2, max: 1.0, step: 0.2, start: 0.6}\n"
      "      first_layer: 8\n      last_layer: 20\n";
  EXPECT_FALSE(make_objective(parse("objective:\n  kind: siw\n" + siw_genes).objective, 30)->paper_default());
  EXPECT_FALSE(make_objective(parse("objective:\n  kind: temperature\n  temperature:\n    genes:\n"
                                    "      temperature: {min: 0.5, max: 2.0, step: 0.1, start: 1.0}\n"
                                    "      first_layer: 8\n      last_layer: 20\n")
                                  .objective,
                              30)
                   ->paper_default());
  const Experiment lpes_siw = parse(
      "objective:\n  kind: combo\n  combo: {methods: [lpes, siw]}\n"
      "  lpes: {curve: bezier, degree: 3}\n" +
      siw_genes);
  EXPECT_FALSE(make_objective(lpes_siw.objective, 30)->paper_default()) << "neither member's paper gives a setting";
  const Experiment mspoe_siw = parse(
      "objective:\n  kind: combo\n  combo: {methods: [mspoe, siw]}\n"
      "  mspoe:\n    genes:\n      min_ratio: {values: [1.0, 1.1], start: 1.0}\n" +
      siw_genes);
  const auto combo_paper = make_objective(mspoe_siw.objective, 30)->paper_default();
  ASSERT_TRUE(combo_paper && combo_paper->mspoe);
  EXPECT_DOUBLE_EQ(combo_paper->mspoe->min_ratio, 1.2);
  EXPECT_FALSE(combo_paper->siw) << "SIW's part is the plain model's";

  const Experiment lpes = parse("objective:\n  kind: lpes\n  lpes: {curve: bezier, degree: 3}\n");
  EXPECT_FALSE(make_objective(lpes.objective, 30)->paper_default());
}

// PHS's paper scales layers 10-25 of its 32-layer models; its paper row on
// a model of another depth takes the same fraction of that model's layers
// (as phs-search proposes them), the channel from the experiment (phs-search
// finds it per model) and the paper's scale, 0.
TEST(MethodObjectives, PhsPaperDefaultTakesThePapersLayersAtTheModelsDepth) {
  const Experiment phs = parse(
      "objective:\n  kind: phs\n  phs:\n    genes:\n"
      "      channel: {values: [502, 494], start: 502}\n      scale: {values: [0.5, -1], start: 0.5}\n"
      "      first_layer: 8\n      last_layer: 19\n");
  for (const auto& [layers, first, last] : {std::tuple{24, 8, 19}, std::tuple{28, 9, 22}, std::tuple{32, 10, 25}}) {
    const auto paper = make_objective(phs.objective, layers)->paper_default();
    ASSERT_TRUE(paper && paper->hidden_channel) << layers << " layers";
    EXPECT_EQ(paper->hidden_channel->channel, 502);
    EXPECT_DOUBLE_EQ(paper->hidden_channel->scale, 0.0);
    ASSERT_FALSE(paper->hidden_channel->layers.empty());
    EXPECT_EQ(paper->hidden_channel->layers.front(), first) << layers << " layers";
    EXPECT_EQ(paper->hidden_channel->layers.back(), last) << layers << " layers";
    EXPECT_EQ(static_cast<int>(paper->hidden_channel->layers.size()), last - first + 1);
  }
  EXPECT_EQ(phs_paper_layers(28), (std::pair<int, int>{9, 22}));
}

TEST(MethodObjectives, OrderedPairsConstrainTheGenome) {
  const Experiment e = parse(
      "objective:\n  kind: phs\n  phs:\n    genes:\n"
      "      channel: 17\n"
      "      first_layer: {min: 4, max: 16, step: 4, start: 8}\n"
      "      last_layer: {min: 8, max: 20, step: 4, start: 12}\n");
  const auto objective = make_objective(e.objective, 30);
  EXPECT_TRUE(objective->space().is_valid({12, 12}));
  EXPECT_FALSE(objective->space().is_valid({16, 12})) << "first_layer > last_layer";
  EXPECT_THROW(objective->decode({16, 12}), std::invalid_argument);
}

}  // namespace
}  // namespace midtune
