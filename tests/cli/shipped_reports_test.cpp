// The HTML report of every shipped experiment (experiments/*.yaml), read in
// a browser: each file runs for real on the test model, shrunk to seconds
// (the same method, objective, strategy and data kind; fewer pairs, items,
// gold positions, candidates and generations), and headless chromium must show every
// section with that run's data: a fitness point per stored generation, the
// best intervention drawn as what its method sets, a held-out band per
// role, and for nsga2 a marker per front member. Files whose benchmark data
// the set-up does not fetch run on the tests' small file of the same format
// (tests/datasets/fixtures) where the user has not fetched it. Set
// MIDTUNE_REPORT_SHOTS=DIR to keep each page and screenshot for a person to
// look at. Skipped without the model; without chromium too, except under CI=true.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/registry.hpp"
#include "tests/cli/browser.hpp"
#include "tests/cli/experiment_cuts.hpp"
#include "tests/cli/results_db.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/model_path.hpp"
#include "tests/test_paths.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using testing::count_of;
using testing::query_rows;
using testing::run_ga_run;

std::vector<std::string> shipped_experiments() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(midtune::testing::source_dir()) / "experiments"))
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The shipped file, shrunk: what it runs is kept, how much of it is cut.
// Each cut keeps the file valid (population = parents + crossovers +
// mutants, racing's first slice below the split, grid values a prefix of
// the file's own).
YAML::Node shrunk(YAML::Node e, const std::string& model) {
  e["backend"]["model"] = model;
  e["backend"]["threads"] = 2;
  YAML::Node d = e["dataset"];
  // At most three gold positions, the file's first, middle and last: the
  // beginning, middle and end every report section groups by, on fewer and
  // shorter prompts (five positions took 2-3x the time, NSGA-II's 145 s).
  if (d["gold_positions"] && d["gold_positions"].size() > 3) {
    const YAML::Node all = d["gold_positions"];
    YAML::Node three;
    for (std::size_t i : {std::size_t{0}, all.size() / 2, all.size() - 1}) three.push_back(all[i]);
    d["gold_positions"] = three;
  }
  // At least one KV pair per gold position: positions that share a chunk
  // record no per-position log-probability (the logprob_* objectives).
  const int positions = d["gold_positions"] ? static_cast<int>(d["gold_positions"].size()) : 3;
  if (d["pairs"]) d["pairs"] = std::min(d["pairs"].as<int>(), std::max(3, positions));
  d["search_samples"] = e["search"]["racing"] ? 3 : 1;  // racing needs a look: 2 units of 3
  d["heldout_samples"] = 1;
  if (d["max_new_tokens"]) d["max_new_tokens"] = 8;
  YAML::Node s = e["search"];
  if (s["racing"]) s["racing"] = YAML::Load("{first: 1, step: 1, confidence: 0.8}");
  if (YAML::Node ga = s["ga"]) {
    // Two genomes (a parent and its mutant): the report draws generations,
    // the best and the held-out roles, whatever made the children.
    for (const auto& [key, value] : std::vector<std::pair<const char*, int>>{
             {"population", 2}, {"parents", 1}, {"crossovers", 0}, {"mutants", 1}, {"generations", 1}})
      ga[key] = value;
    if (ga["patience"]) ga["patience"] = 1;
    if (ga["elitism"]) ga["elitism"] = std::min(ga["elitism"].as<int>(), 1);
    if (ga["tournament_size"]) ga["tournament_size"] = 2;
  }
  if (YAML::Node nsga2 = s["nsga2"]) {
    nsga2["population"] = 4;
    nsga2["generations"] = 1;
  }
  if (s["random"]) s["random"]["samples"] = 2;
  testing::keep_first_grid_values(s, 2);
  return e;
}

// The intervention fields a best of this objective kind sets (the
// data-method of each drawing in the report's "best" section).
// The Intervention field a method sets, as the registry says.
std::set<std::string> fields_of(const std::string& method) { return {method_named(method).field}; }

class ShippedReport : public testing::TempDirTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    model_ = testing::test_model_path().string();
    if (model_.empty()) GTEST_SKIP() << "model not found (set MIDTUNE_MODEL)";
    browser_ = testing::chromium();
    if (browser_.empty()) {
      if (testing::in_ci()) FAIL() << "chromium not found; CI=true: scripts/test.sh installs it";
      GTEST_SKIP() << "chromium not found (apt-get install chromium; scripts/test.sh does it)";
    }
  }
  std::string sql(const std::string& query) { return query_rows(path("results.db"), query).at(0); }
  std::string model_, browser_;
};

TEST_P(ShippedReport, RendersTheAnswerOfAShrunkRealRun) {
  const fs::path file = fs::path(midtune::testing::source_dir()) / "experiments" / (GetParam() + ".yaml");
  YAML::Node e = YAML::LoadFile(file.string());
  // Benchmark data the set-up does not fetch (experiments/README.md "Data
  // files"): where the user has not fetched it, the run reads the tests' own
  // small file in the same format (tests/datasets/fixtures, invented texts),
  // so every shipped file's report is still drawn from a real run.
  if (e["dataset"]["file"] && !e["dataset"]["file"].IsNull()) {
    std::string data = e["dataset"]["file"].as<std::string>();
    if (data.rfind("~/", 0) == 0) data = std::string(std::getenv("HOME") ? std::getenv("HOME") : "") + data.substr(1);
    if (!fs::exists(file.parent_path() / data)) {
      const std::string kind = e["dataset"]["kind"].as<std::string>();
      const fs::path fixtures = fs::path(midtune::testing::source_dir()) / "tests" / "datasets" / "fixtures";
      const fs::path stand_in = kind == "kv"     ? fixtures / "kv-retrieval-6_keys-fixture.jsonl.gz"
                                : kind == "mdqa" ? fixtures / "nq-open-oracle-fixture.jsonl.gz"
                                                 : fs::path();
      if (stand_in.empty()) GTEST_SKIP() << file.filename() << " needs " << data << " (no stand-in for " << kind << ")";
      std::printf("%s: %s not fetched; reading the fixture %s\n", file.filename().c_str(), data.c_str(),
                  stand_in.filename().c_str());
      e["dataset"]["file"] = stand_in.string();
    }
  }
  const std::string name = e["name"].as<std::string>();
  const std::string method = e["objective"]["kind"].as<std::string>();
  const std::string strategy = e["search"]["strategy"] ? e["search"]["strategy"].as<std::string>() : "ga";
  {
    YAML::Emitter out;
    out << shrunk(e, model_);
    std::ofstream(path("e.yaml")) << out.c_str() << "\n";
  }
  const auto run = run_ga_run({path("e.yaml"), "--db", path("results.db"), "--quiet"}, dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string html = path(name + ".html");
  const auto report = run_ga_run(
      {"report", path("results.db"), "--experiment", name, "--format", "html", "--out", html}, dir_.string());
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string dom = testing::render(browser_, html, path("shot.png"), dir_.string());
  ASSERT_NE(dom.find("</html>"), std::string::npos) << "chromium did not parse the page";
  if (const char* keep = std::getenv("MIDTUNE_REPORT_SHOTS"); keep && *keep) {
    fs::create_directories(keep);
    fs::copy_file(html, fs::path(keep) / (GetParam() + ".html"), fs::copy_options::overwrite_existing);
    fs::copy_file(path("shot.png"), fs::path(keep) / (GetParam() + ".png"), fs::copy_options::overwrite_existing);
  }

  for (const char* section : {"experiment", "answer", "fitness", "best", "heldout", "comparisons"})
    EXPECT_NE(dom.find(std::string("<section id=\"") + section + "\""), std::string::npos) << section;
  std::string lower = dom;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  EXPECT_NE(lower.find("smollm2"), std::string::npos) << "the model it ran on";
  EXPECT_NE(dom.find("kernel path"), std::string::npos) << "how it was computed";
  EXPECT_NE(dom.find(method), std::string::npos) << "the method";

  // Fitness: one best and one mean point per stored generation.
  const std::string generations = sql("SELECT count(*) FROM generations");
  EXPECT_GT(std::stoi(generations), 0);
  EXPECT_EQ(std::to_string(count_of(dom, "class=\"gen-best\"")), generations);
  EXPECT_EQ(std::to_string(count_of(dom, "class=\"gen-mean\"")), generations);

  // The best intervention, drawn as what its method sets (combo: each member).
  const auto json_report = nlohmann::json::parse(
      run_ga_run({"report", path("results.db"), "--experiment", name, "--format", "json"}, dir_.string()).out);
  const nlohmann::json& best = json_report.at("best").at("intervention");
  std::set<std::string> expected;
  if (method == "combo") {
    for (const auto& member : e["objective"]["combo"]["methods"]) {
      const auto fields = fields_of(member.as<std::string>());
      expected.insert(fields.begin(), fields.end());
    }
  } else {
    expected = fields_of(method);
  }
  for (const std::string& field : expected) {
    if (!best.contains(field)) continue;  // the best leaves this method off (e.g. the plain model)
    EXPECT_EQ(count_of(dom, "class=\"best-drawing\" data-method=\"" + field + "\""), 1u) << field << "\n" << best;
  }
  std::size_t drawn = 0;
  for (const std::string& field : expected) drawn += best.contains(field) ? 1 : 0;
  EXPECT_EQ(count_of(dom, "class=\"best-drawing\""), drawn) << "only the method's own drawings";
  if (drawn == 0) {
    EXPECT_NE(dom.find("plain model"), std::string::npos);
  }
  // The text report says what the best sets, whatever the method: its
  // intervention as stored, and a per-layer RoPE table only when it has one.
  const auto markdown =
      run_ga_run({"report", path("results.db"), "--experiment", name, "--format", "md"}, dir_.string());
  ASSERT_EQ(markdown.exit_code, 0) << markdown.err;
  EXPECT_NE(markdown.out.find("intervention: `" + best.dump() + "`"), std::string::npos) << markdown.out;
  EXPECT_EQ(markdown.out.find("RoPE scales") != std::string::npos, !json_report["best"]["layer_scales"].empty())
      << markdown.out;

  // Held-out: a line per evaluated role, a band per role except front members,
  // a verdict per comparison with the best and per reference setting (the
  // paper default, PI) against the baseline.
  const int roles = std::stoi(sql("SELECT count(*) FROM heldout_results"));
  const int fronts = std::stoi(sql("SELECT count(*) FROM heldout_results WHERE role GLOB 'front-*'"));
  EXPECT_GE(roles, 2) << "best and baseline at least";
  EXPECT_EQ(static_cast<int>(count_of(dom, "class=\"role-line\"")), roles);
  EXPECT_EQ(static_cast<int>(count_of(dom, "class=\"role-band\"")), roles - fronts);
  const int references = roles - fronts - 2;  // neither the best, the baseline nor a front member
  EXPECT_EQ(static_cast<int>(count_of(dom, "<div class=\"verdict")), roles - 1 + references);

  if (strategy == "nsga2") {
    ASSERT_NE(dom.find("<section id=\"pareto\""), std::string::npos);
    const std::size_t members = json_report.at("pareto_front").size();
    ASSERT_GT(members, 0u);
    EXPECT_EQ(count_of(dom, "class=\"front-point"), members) << "a marker per front member";
    EXPECT_EQ(static_cast<int>(count_of(dom, "class=\"front-point held-out\"")), fronts)
        << "the members the held-out step evaluated are marked";
  } else {
    EXPECT_EQ(dom.find("<section id=\"pareto\""), std::string::npos) << "only nsga2 has a front";
  }
  EXPECT_TRUE(testing::screenshot_has_content(path("shot.png")));
}

INSTANTIATE_TEST_SUITE_P(Experiments, ShippedReport, ::testing::ValuesIn(shipped_experiments()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace midtune
