// ga-run end to end on the synthetic quickstart (tests/e2e/experiments):
// the search ends with the held-out step, `report` shows the three roles
// side by side (md, csv, json) and writes the SVG, `eval` prints one
// intervention's per-position table and refuses a bad intervention file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"

namespace midtune::testing {
namespace {

class HeldoutCliTest : public TempDirTest {
 protected:
  std::string experiment() const {
    const std::string copy = path("quickstart-synthetic.yaml");
    std::filesystem::copy_file(std::string(MIDTUNE_SOURCE_DIR) + "/tests/e2e/experiments/quickstart-synthetic.yaml",
                               copy);
    return copy;
  }
};

TEST_F(HeldoutCliTest, SearchEndsWithHeldoutAndReportShowsIt) {
  const std::string file = experiment();
  const Finished run = run_ga_run({file, "-q"}, dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("held-out ("), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("pi-mean (x"), std::string::npos) << run.out;

  const std::string db = path("results.db");
  const Finished md = run_ga_run({"report", db}, dir_.string());
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("## Held-out accuracy by gold position"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("Pearson r"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(path("quickstart-synthetic-heldout.svg"))) << md.err;

  const Finished js = run_ga_run({"report", db, "--format", "json"}, dir_.string());
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const auto report = nlohmann::json::parse(js.out);
  ASSERT_EQ(report["heldout"].size(), 3u);
  EXPECT_EQ(report["heldout"][0]["role"], "baseline");
  EXPECT_EQ(report["heldout"][2]["intervention"], report["best"]["intervention"]);

  const Finished csv = run_ga_run({"report", db, "--format", "csv"}, dir_.string());
  EXPECT_NE(csv.out.find("heldout,best,accuracy@0.5,"), std::string::npos) << csv.out;

  // eval --best on the held-out split is the stored 'best' evaluation (cached).
  const Finished best = run_ga_run({"eval", file, "--best"}, dir_.string());
  ASSERT_EQ(best.exit_code, 0) << best.err;
  EXPECT_NE(best.out.find("from the cache"), std::string::npos) << best.out;
}

TEST_F(HeldoutCliTest, EvalPrintsTableAndNamesBadInterventionFile) {
  const std::string file = experiment();
  {
    std::ofstream(path("pi.json")) << R"({"rope_scale": [[1.5]]})";
    std::ofstream(path("bad.json")) << R"({"rope_scale": "x"})";
  }
  const Finished ok = run_ga_run({"eval", file, "--intervention", path("pi.json"), "--split", "search"}, dir_.string());
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("search split"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("U-index"), std::string::npos) << ok.out;
  const Finished bad = run_ga_run({"eval", file, "--intervention", path("bad.json")}, dir_.string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.json"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace midtune::testing
