// experiments/quickstart-gemma3.yaml end to end on the real Gemma 3
// (MIDTUNE_GEMMA3_MODEL, else the peers folder that scripts/fetch_peers.sh
// fills; ctest label `peer`): the LPES search runs to its held-out step,
// and the report shows a curve over all 18 layers and the three held-out
// roles on every position. The file runs shrunk to one prompt per gold
// position and split and a 2-genome GA (18 prompts instead of 63): the
// pipeline on the model is the point, not the result. Missing model:
// skipped, under CI=true a failure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/test_paths.hpp"

namespace midtune::testing {
namespace {

namespace fs = std::filesystem;

fs::path gemma3_model() {
  if (const char* env = std::getenv("MIDTUNE_GEMMA3_MODEL"); env && *env) return env;
  if (const char* env = std::getenv("MIDTUNE_PEERS_DIR"); env && *env) return fs::path(env) / "gemma-3-270m-q4_k_m.gguf";
  const char* home = std::getenv("HOME");
  return home ? fs::path(home) / ".cache/midtune/peers-0.3.36/gemma-3-270m-q4_k_m.gguf" : fs::path();
}

class Gemma3Quickstart : public TempDirTest {};

TEST_F(Gemma3Quickstart, SearchAndHeldoutRunEndToEnd) {
  if (!fs::exists(gemma3_model())) {
    const std::string why = gemma3_model().string() + " missing (scripts/fetch_peers.sh, scripts/fetch_gemma3.sh)";
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL() << why << "; CI=true: a failure";
    GTEST_SKIP() << why;
  }
  // The shipped file, its model line pointing at this machine's copy, with
  // fewer samples and genomes (each prompt is seconds of the 270M model).
  std::ifstream in(midtune::testing::source_dir() + "/experiments/quickstart-gemma3.yaml");
  ASSERT_TRUE(in);
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"model: ~/.cache/midtune/gemma-3-270m-q4_k_m.gguf", "model: " + gemma3_model().string()},
      {"search_samples: 2", "search_samples: 1"},
      {"heldout_samples: 3", "heldout_samples: 1"},
      {"ga: {population: 4, parents: 2, generations: 1, mutants: 1, crossovers: 1}",
       "ga: {population: 2, parents: 1, generations: 1, mutants: 1, crossovers: 0}"},
  };
  for (const auto& [shipped, shrunk] : edits) {
    const auto at = yaml.find(shipped);
    ASSERT_NE(at, std::string::npos) << shipped;
    yaml.replace(at, shipped.size(), shrunk);
  }
  std::ofstream(path("quickstart-gemma3.yaml")) << yaml;

  const Finished run = run_ga_run({path("quickstart-gemma3.yaml"), "-q"}, dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("held-out ("), std::string::npos) << run.out;

  const Finished js = run_ga_run({"report", path("results.db"), "--format", "json"}, dir_.string());
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const auto report = nlohmann::json::parse(js.out);
  EXPECT_EQ(report["provenance"]["model"]["architecture"], "gemma3");
  EXPECT_EQ(report["best"]["layer_scales"].size(), 18u);  // the curve covers every layer
  EXPECT_EQ(report["generations"].size(), 2u);
  ASSERT_EQ(report["heldout"].size(), 3u);
  for (const auto& role : report["heldout"]) {
    ASSERT_EQ(role["position_scores"].size(), 3u) << role["role"];
    for (const auto& p : role["position_scores"]) EXPECT_EQ(p["samples"], 1) << role["role"];
  }
}

}  // namespace
}  // namespace midtune::testing
