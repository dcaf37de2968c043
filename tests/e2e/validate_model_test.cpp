// `ga-run validate` on engine experiments checks every method's parameters
// against the real model: a layer past the model, a
// channel past the hidden size, min_ratio above max_ratio, a negative CALIOPE
// gap (Phi would not increase) are refused with the key and the reason, exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/cli/experiment_cuts.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/model_path.hpp"
#include "tests/test_paths.hpp"

namespace midtune::testing {
namespace {

class ValidateOnModel : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    if (test_model_path().empty()) GTEST_SKIP() << "model not found (set MIDTUNE_MODEL)";
  }
  // An engine experiment on generated KV data with this objective section.
  std::string experiment(const std::string& objective, const std::string& search = "search: {strategy: random}\n") {
    const std::string file = path("e.yaml");
    std::ofstream(file) << "name: v\nbackend: {kind: engine, model: " << test_model_path().string()
                        << "}\ndataset: {kind: kv, pairs: 4, search_samples: 1, heldout_samples: 1}\n"
                        << objective << search;
    return file;
  }
  Finished validate(const std::string& file) { return run_ga_run({"validate", file}, dir_.string()); }
};

TEST_F(ValidateOnModel, MethodParametersAreCheckedAgainstTheModel) {
  const Finished ok = validate(experiment(
      "objective:\n  kind: phs\n  phs:\n    genes:\n      channel: {values: [17, 300], start: 17}\n      scale: {values: [0, -1]}\n"));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;

  const Finished channel = validate(experiment(
      "objective:\n  kind: phs\n  phs:\n    genes:\n      channel: {values: [17, 576], start: 17}\n"));
  EXPECT_EQ(channel.exit_code, 2);
  EXPECT_NE(channel.err.find("channel"), std::string::npos) << channel.err;
  EXPECT_NE(channel.err.find("hidden size 576"), std::string::npos) << channel.err;

  const Finished layers = validate(experiment(
      "objective:\n  kind: siw\n  siw:\n    genes:\n      alpha_dense: 0.5\n      first_layer: 10\n"
      "      last_layer: {min: 20, max: 30, step: 1, start: 20}\n"));
  EXPECT_EQ(layers.exit_code, 2);
  EXPECT_NE(layers.err.find("objective.siw.genes.last_layer"), std::string::npos) << layers.err;
  EXPECT_NE(layers.err.find("0..29"), std::string::npos) << layers.err;

  const Finished ratios = validate(experiment(
      "objective:\n  kind: mspoe\n  mspoe:\n    genes:\n      min_ratio: 1.9\n      max_ratio: 1.5\n"));
  EXPECT_EQ(ratios.exit_code, 2);
  EXPECT_NE(ratios.err.find("min_ratio"), std::string::npos) << ratios.err;

  const Finished gap = validate(experiment(
      "objective:\n  kind: caliope\n  caliope:\n    genes:\n      gap: -5\n"));
  EXPECT_EQ(gap.exit_code, 2);
  EXPECT_NE(gap.err.find("gap"), std::string::npos) << gap.err;
}

// Every shipped experiment validates against the real model (objective,
// strategy, data split, every gene's range); the only acceptable refusal is
// benchmark data the set-up does not fetch.
TEST_F(ValidateOnModel, EveryShippedExperimentValidates) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(midtune::testing::source_dir() + "/experiments")) {
    if (entry.path().extension() != ".yaml") continue;
    const Finished v = validate(entry.path().string());
    const bool missing_data = v.exit_code == 2 && v.err.find("dataset.file") != std::string::npos &&
                              v.err.find("not found") != std::string::npos;
    EXPECT_TRUE(v.exit_code == 0 || missing_data) << entry.path() << "\n" << v.err;
    checked += v.exit_code == 0;
  }
  EXPECT_GE(checked, 6) << "the six generated-KV experiments need no data file";
}

// The findings' experiments (experiments/findings/) run for hours on real
// models that CI does not fetch; here each validates, and each kind runs
// cut to the smallest size on the test model's CPU engine (3 pairs, one
// prompt per position and split but two at each held-out position between
// the ends, one generation of a 2-genome GA, 2 random draws, two values a
// grid gene, no racing), results in a scratch file, so a change to the format or the code
// that would break one is caught before anyone starts it. Files that differ
// only in values (the calibration files of every model and length; one
// method's search for two models or lengths) run the same code once cut:
// one of each kind runs (a baseline evaluation, on generated pairs and on
// each kind of Lost-in-the-Middle file; each objective with its search
// strategy), and every file's values are validated.
TEST_F(ValidateOnModel, EveryFindingsExperimentRunsCutDown) {
  const std::vector<std::pair<std::regex, std::string>> cuts = {
      {std::regex(R"(\bmodel: \S+)"), "model: " + test_model_path().string()},
      // The 1.5B's files run on a GPU; cut, on the test model's CPU engine.
      {std::regex(R"(\bdevice: cuda\b)"), "device: cpu"},
      // The Lost-in-the-Middle release's files (not fetched by the set-up):
      // the fixtures in their formats.
      {std::regex(R"(\bfile: \S*kv-retrieval-\S+)"),
       "file: " + midtune::testing::source_dir() + "/tests/datasets/fixtures/kv-retrieval-6_keys-fixture.jsonl.gz"},
      {std::regex(R"(\bfile: \S*nq-open-oracle\S+)"),
       "file: " + midtune::testing::source_dir() + "/tests/datasets/fixtures/nq-open-oracle-fixture.jsonl.gz"},
      {std::regex(R"(\bpairs: \d+)"), "pairs: 3"},
      {std::regex(R"(\bdocuments: \d+)"), "documents: 3"},
      {std::regex(R"(\bmax_new_tokens: \d+)"), "max_new_tokens: 8"},
      {std::regex(R"(\b(search|heldout)_samples: \d+)"), "$1_samples: 1"},
      {std::regex(R"(\bgenerations: \d+)"), "generations: 1"},
      {std::regex(R"(\bpopulation: \d+)"), "population: 2"},
      {std::regex(R"(\bparents: \d+)"), "parents: 1"},
      {std::regex(R"(\bmutants: \d+)"), "mutants: 1"},
      {std::regex(R"(\bcrossovers: \d+)"), "crossovers: 0"},
      {std::regex(R"(\bsamples: \d+)"), "samples: 2"},
      // Racing needs more than one search item a position.
      {std::regex(R"(\n\s*racing: \{[^}]*\})"), ""},
      // PHS channels of the real model's hidden width; the test model's is
      // 576, so the channel gene takes two it has.
      {std::regex(R"(\bchannel: \{values: \[[^\]]*\], start: \d+\})"), "channel: {values: [100, 139], start: 100}"},
      {std::regex(R"((\n\s*)channel: \[[^\]]*\])"), "$1channel: [100, 139]"},
      {std::regex(R"(\bdb: \S+)"), "db: " + path("findings.db")},
  };
  // In name order, so which file of a kind runs does not depend on the file system.
  std::set<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(midtune::testing::source_dir() + "/experiments/findings")) {
    if (entry.path().extension() == ".yaml") files.insert(entry.path());
  }
  int ran = 0;
  std::set<std::string> kinds_run;
  for (const std::filesystem::path& file_path : files) {
    std::ifstream in(file_path);
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    for (const auto& [pattern, cut] : cuts) yaml = std::regex_replace(yaml, pattern, cut);
    YAML::Node node = YAML::Load(yaml);
    keep_first_grid_values(node["search"], 2);
    // Per-position held-out counts stay a list of unequal counts, one per
    // gold position: one item at each end, two between.
    if (YAML::Node heldout = node["dataset"]["heldout_samples"]; heldout.IsSequence()) {
      const std::size_t positions = heldout.size();
      YAML::Node cut(YAML::NodeType::Sequence);
      for (std::size_t i = 0; i < positions; ++i) cut.push_back(i == 0 || i + 1 == positions ? 1 : 2);
      node["dataset"]["heldout_samples"] = cut;
    }
    yaml = YAML::Dump(node);
    const std::string file = path(file_path.filename().string());
    std::ofstream(file) << yaml;
    const Finished v = validate(file);
    EXPECT_EQ(v.exit_code, 0) << file_path << "\n" << v.err;
    // A baseline file is evaluated (ga-run eval, as findings.sh calibrate runs it);
    // any other is a search, run to its held-out step.
    const std::string name = file_path.filename().string();
    const bool baseline = name.find("-baseline") != std::string::npos;
    const bool data_file = node["dataset"]["file"] && !node["dataset"]["file"].IsNull();
    const std::string dataset_kind = node["dataset"]["kind"].as<std::string>();
    const std::string kind =
        baseline ? (data_file ? "baseline/" + dataset_kind + " file" : "baseline")
                 : node["objective"]["kind"].as<std::string>() + "/" + node["search"]["strategy"].as<std::string>();
    if (!kinds_run.insert(kind).second) continue;
    const Finished run = baseline ? run_ga_run({"eval", file, "--split", "heldout"}, dir_.string())
                                  : run_ga_run({file, "--quiet"}, dir_.string());
    EXPECT_EQ(run.exit_code, 0) << file_path << "\n" << run.err;
    ++ran;
  }
  EXPECT_EQ(kinds_run, (std::set<std::string>{"baseline", "baseline/kv file", "baseline/mdqa file", "mspoe/grid",
                                              "lpes/ga", "siw/ga", "caliope/random", "phs/grid", "combo/ga",
                                              "temperature/ga", "selfextend/ga", "string/ga"}))
      << "a baseline evaluation (generated pairs, each kind of data file) and every method's search";
  EXPECT_EQ(ran, static_cast<int>(kinds_run.size()));
}

}  // namespace
}  // namespace midtune::testing
