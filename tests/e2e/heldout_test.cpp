// Held-out evaluation on the synthetic test double: cached split
// evaluations, the three roles stored by role, PI at the mean scale, the
// side-by-side rendering and the SVG.
#include "core/search/heldout.hpp"

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "backends/synthetic/synthetic_test_double.hpp"
#include "core/report/heldout_report.hpp"
#include "core/report/svg_plot.hpp"
#include "core/experiment/experiment.hpp"
#include "core/search/search_run.hpp"
#include "objectives/objective.hpp"
#include "tests/cli/temp_dir.hpp"

namespace midtune {
namespace {

using nlohmann::json;

class CountingBackend : public SyntheticTestDoubleBackend {
 public:
  CountingBackend() : SyntheticTestDoubleBackend({.layers = 4, .heads = 2, .seed = 5}) {}
  std::vector<SampleOutput> run(const Intervention& iv, const std::vector<BatchItem>& b, const RunOptions& o) override {
    ++runs;
    return SyntheticTestDoubleBackend::run(iv, b, o);
  }
  int runs = 0;
};

// Test double for methods the synthetic model does not model: every
// intervention scores as the plain model (the held-out bookkeeping is under test).
class MethodBlindBackend : public CountingBackend {
 public:
  std::vector<SampleOutput> run(const Intervention&, const std::vector<BatchItem>& b, const RunOptions& o) override {
    return CountingBackend::run(Intervention{}, b, o);
  }
  void validate(const Intervention&) const override {}
};

class HeldoutTest : public testing::TempDirTest {
 protected:
  SearchInputs split_inputs(Backend& backend, const std::string& slice) {
    SearchInputs in;
    in.backend = &backend;
    in.gold_positions = {0.0, 0.5, 1.0};
    for (std::size_t k = 0; k < in.gold_positions.size(); ++k)
      for (int i = 0; i < 8; ++i) {
        in.items.push_back({slice + std::to_string(k) + "-" + std::to_string(i), "prompt", {}, "gold",
                                   in.gold_positions[k]});
        in.position_index.push_back(k);
      }
    in.dataset_slice = {{"fixture", slice}};
    in.metric = "teacher_forced";
    in.run_options.mode = Mode::teacher_forced;
    in.score = [](std::size_t, const SampleOutput& o) { return o.gold_emitted_first; };
    return in;
  }

  // An experiment whose only individual is `best`, evaluated on the search split.
  std::int64_t experiment_with_best(Store& store, const SearchInputs& search, const Intervention& best) {
    ExperimentRecord e;
    e.name = "fixture";
    e.config_text = "name: fixture\n";
    e.config_hash = "0";
    e.search_config = json::object();
    const std::int64_t id = store.create_experiment(e).id;
    IndividualRecord individual;
    individual.experiment_id = id;
    individual.candidate_id = 0;
    individual.genome = json::array({1});
    individual.genome_hash = "g";
    individual.origin = "init";
    individual.fitness = 0.5;
    individual.evaluation_id = evaluate_on_split(store, search, best).evaluation_id;
    store.insert_individual(individual);
    return id;
  }
};

TEST_F(HeldoutTest, PiAtMeanScaleAveragesEveryScale) {
  Intervention lpes;
  lpes.rope_scale = {{1.0}, {2.0}, {1.5}, {1.5}};
  EXPECT_EQ(pi_at_mean_scale(lpes).rope_scale, (std::vector<std::vector<double>>{{1.5}}));
  EXPECT_TRUE(pi_at_mean_scale(Intervention{}).empty());
}

TEST_F(HeldoutTest, SplitEvaluationsAreCachedByIntervention) {
  Store store(path("r.db"));
  CountingBackend backend;
  const SearchInputs in = split_inputs(backend, "h");
  Intervention pi;
  pi.rope_scale = {{1.3}};
  const SplitEvaluation first = evaluate_on_split(store, in, pi);
  const SplitEvaluation again = evaluate_on_split(store, in, pi);
  EXPECT_FALSE(first.cache_hit);
  EXPECT_TRUE(again.cache_hit);
  EXPECT_EQ(first.evaluation_id, again.evaluation_id);
  EXPECT_EQ(first.scores, again.scores);
  EXPECT_EQ(backend.runs, 2) << "24 items: the first runs two stored slices (16 and 8), the second nothing";
  ASSERT_EQ(first.scores.size(), 3u);
  EXPECT_EQ(first.scores[0].samples, 8);
  EXPECT_TRUE(first.summary.contains("u_shape_pearson"));
}

TEST_F(HeldoutTest, StoresThreeRolesAndRendersThem) {
  Store store(path("r.db"));
  CountingBackend backend;
  Intervention best;
  best.rope_scale = {{1.0}, {1.2}, {1.4}, {1.8}};
  const std::int64_t id = experiment_with_best(store, split_inputs(backend, "s"), best);
  const SearchInputs heldout = split_inputs(backend, "h");
  const auto entries = run_heldout(store, id, heldout, heldout.objective);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].intervention, best);
  EXPECT_EQ(entries[2].intervention.rope_scale, (std::vector<std::vector<double>>{{1.35}}));
  // A second run reuses every evaluation and keeps one row per role.
  const int runs = backend.runs;
  run_heldout(store, id, heldout, heldout.objective);
  EXPECT_EQ(backend.runs, runs);

  const json stored = heldout_json(store, id);
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_EQ(stored[0]["role"], "baseline");
  EXPECT_EQ(stored[1]["role"], "pi-mean");
  EXPECT_EQ(stored[2]["role"], "best");
  EXPECT_EQ(stored[2]["layer_scales"].size(), 4u);
  EXPECT_EQ(stored[1]["position_scores"].size(), 3u);

  std::ostringstream table;
  report::print_side_by_side(stored, table);
  EXPECT_NE(table.str().find("pi-mean (x1.35)"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("Pearson r"), std::string::npos);
  const std::string svg = report::heldout_plot_svg(stored, "t");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  std::size_t lines = 0;
  for (std::size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 4u) << "three roles and the best curve's scales";
}

TEST_F(HeldoutTest, MethodsWithAPaperDefaultShowItInsteadOfPi) {
  const Experiment e = parse_experiment(
      "name: t\nbackend: {kind: synthetic-test-double, layers: 4, heads: 2}\ndataset: {kind: kv, pairs: 4}\n"
      "objective:\n  kind: mspoe\n  mspoe:\n    genes:\n      min_ratio: {values: [1.0, 1.4], start: 1.0}\n"
      "      max_ratio: {values: [1.5, 2.0], start: 1.5}\n      first_layer: 1\n"
      "search: {strategy: random}\n",
      path("t.yaml"));
  const auto objective = make_objective(e.objective, 4);
  Store store(path("r.db"));
  MethodBlindBackend backend;
  SearchInputs search = split_inputs(backend, "s");
  search.objective = objective.get();
  const Intervention best = objective->decode({1, 1});  // 1.4 - 2.0
  const std::int64_t id = experiment_with_best(store, search, best);
  SearchInputs heldout = split_inputs(backend, "h");
  heldout.objective = objective.get();
  const auto entries = run_heldout(store, id, heldout, heldout.objective);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[2].role, "paper-default");
  ASSERT_TRUE(entries[2].intervention.mspoe);
  EXPECT_DOUBLE_EQ(entries[2].intervention.mspoe->min_ratio, 1.2);
  const json stored = heldout_json(store, id);
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_EQ(stored[0]["role"], "baseline");
  EXPECT_EQ(stored[1]["role"], "paper-default");
  EXPECT_EQ(stored[2]["role"], "best");
  std::ostringstream table;
  report::print_side_by_side(stored, table);
  EXPECT_NE(table.str().find("paper-default"), std::string::npos) << table.str();
}

// The HTML report's plots mark what a reader looks for: each front member
// as a point (the held-out ones ringed), a searched value on its range and
// a fixed one as text.
TEST(ReportPlots, FrontPointsAndValueRanges) {
  const json front = json::parse(R"([
    {"candidate": 3, "objectives": {"a": 1.0, "b": -2.0}, "fitness": 0.1},
    {"candidate": 5, "objectives": {"a": 0.5, "b": -1.0}, "fitness": 0.2},
    {"candidate": 9, "objectives": {"a": 0.0, "b": -0.5}, "fitness": 0.3}])");
  const std::string svg = report::pareto_front_svg(front, {"a", "b"}, "t", {5});
  std::size_t points = 0, ringed = 0;
  for (auto at = svg.find("class=\"front-point"); at != std::string::npos; at = svg.find("class=\"front-point", at + 1))
    ++points;
  for (auto at = svg.find("front-point held-out"); at != std::string::npos; at = svg.find("front-point held-out", at + 1))
    ++ringed;
  EXPECT_EQ(points, 3u);
  EXPECT_EQ(ringed, 1u);
  EXPECT_NE(svg.find("data-candidate=\"5\""), std::string::npos);

  const std::string bars = report::value_bars_svg("layers [1,2]", {{"scale", 0.5, -1.0, 1.0}, {"sigma", 1.0, 1.0, 1.0}});
  ASSERT_NE(bars.find("class=\"value-bar\""), std::string::npos);
  EXPECT_EQ(bars.find("class=\"value-bar\""), bars.rfind("class=\"value-bar\"")) << "one searched value";
  EXPECT_NE(bars.find("0.5  (-1 to 1)"), std::string::npos) << bars;
  EXPECT_NE(bars.find("1  (fixed)"), std::string::npos) << bars;
}

// Front members' held-out lines: one colour each, so a reader tells them
// apart; the other roles keep theirs.
TEST(ReportPlots, FrontMembersGetColoursOfTheirOwn) {
  const json scores = json::parse(R"([{"position": 0.0, "accuracy": 0.5}, {"position": 1.0, "accuracy": 0.7}])");
  json heldout = json::array();
  for (const char* role : {"best", "baseline", "front-3", "front-5", "front-9"})
    heldout.push_back({{"role", role}, {"position_scores", scores}});
  const std::string svg = report::heldout_bands_svg(heldout);
  auto line_colour = [&svg](const std::string& role) {
    const auto group = svg.find("class=\"role-line\" data-role=\"" + role + "\"");
    EXPECT_NE(group, std::string::npos) << role;
    const auto stroke = svg.find("stroke=\"", group) + 8;
    return svg.substr(stroke, svg.find('"', stroke) - stroke);
  };
  const std::set<std::string> colours = {line_colour("best"), line_colour("baseline"), line_colour("front-3"),
                                         line_colour("front-5"), line_colour("front-9")};
  EXPECT_EQ(colours.size(), 5u) << svg;
}

}  // namespace
}  // namespace midtune
