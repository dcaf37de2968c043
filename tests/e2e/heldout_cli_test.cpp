// ga-run end to end on the synthetic quickstart (tests/e2e/experiments):
// the search ends with the held-out step, `report` shows the three roles
// side by side (md, csv, json) and writes the SVG, `eval` prints one
// intervention's per-position table and refuses a bad intervention file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/test_paths.hpp"

namespace midtune::testing {
namespace {

class HeldoutCliTest : public TempDirTest {
 protected:
  std::string experiment() const {
    const std::string copy = path("quickstart-synthetic.yaml");
    std::filesystem::copy_file(midtune::testing::source_dir() + "/tests/e2e/experiments/quickstart-synthetic.yaml",
                               copy);
    return copy;
  }
  // pi.json: PI at scale 1.5; bad.json: not an Intervention.
  void write_intervention_files() const {
    std::ofstream(path("pi.json")) << R"({"rope_scale": [[1.5]]})";
    std::ofstream(path("bad.json")) << R"({"rope_scale": "x"})";
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
  write_intervention_files();
  const Finished ok = run_ga_run({"eval", file, "--intervention", path("pi.json"), "--split", "search"}, dir_.string());
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("search split"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("U-index"), std::string::npos) << ok.out;
  const Finished bad = run_ga_run({"eval", file, "--intervention", path("bad.json")}, dir_.string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.json"), std::string::npos) << bad.err;
  // --device moves the file's engine; a file without one is refused by name.
  const Finished no_engine = run_ga_run({"eval", file, "--device", "cpu"}, dir_.string());
  EXPECT_EQ(no_engine.exit_code, 2);
  EXPECT_NE(
      no_engine.err.find("backend.device: cannot run on cpu: the backend is synthetic-test-double, not the engine"),
      std::string::npos)
      << no_engine.err;
}

// eval --against prints both interventions and the held-out report's paired
// statistics; the second evaluation of the same pair comes from the cache
// and prints the same figures (fixed bootstrap seed).
TEST_F(HeldoutCliTest, EvalAgainstPrintsThePairedStatistics) {
  const std::string file = experiment();
  write_intervention_files();
  const std::vector<std::string> args = {"eval", file, "--intervention", path("pi.json"), "--against", "baseline"};
  const Finished first = run_ga_run(args, dir_.string());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  for (const char* part : {"against: ", "95 % Wilson intervals", "intervention vs baseline: ", "McNemar p",
                           "items only the first / only the second"})
    EXPECT_NE(first.out.find(part), std::string::npos) << part << "\n" << first.out;
  const Finished again = run_ga_run(args, dir_.string());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const auto statistics = [](const std::string& out) { return out.substr(out.find("## 95 % Wilson")); };
  EXPECT_EQ(statistics(again.out), statistics(first.out));
  EXPECT_NE(again.out.find("from the cache"), std::string::npos) << again.out;

  const Finished file_against = run_ga_run({"eval", file, "--against", path("pi.json"), "--split", "search"}, dir_.string());
  ASSERT_EQ(file_against.exit_code, 0) << file_against.err;
  EXPECT_NE(file_against.out.find("baseline vs against: "), std::string::npos) << file_against.out;

  const Finished bad = run_ga_run({"eval", file, "--against", path("bad.json")}, dir_.string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.json"), std::string::npos) << bad.err;
}

// The synthetic quickstart as a Pareto search: the report lists the final
// front with its objectives, and the held-out step evaluated every front
// member besides the best.
TEST_F(HeldoutCliTest, Nsga2ReportListsTheFrontAndHeldoutEvaluatesIt) {
  const std::string file = experiment();
  std::string text;
  {
    std::ifstream in(file);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string ga = "  strategy: ga\n  ga: {population: 16, parents: 6, generations: 8, mutants: 8, crossovers: 2}\n";
  ASSERT_NE(text.find(ga), std::string::npos);
  text.replace(text.find(ga), ga.size(),
               "  strategy: nsga2\n  unique_children: true\n  objectives: [accuracy_middle, logprob_end]\n"
               "  nsga2: {population: 8, generations: 3}\n");
  std::ofstream(file) << text;
  const Finished run = run_ga_run({file, "-q"}, dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;

  const Finished md = run_ga_run({"report", path("results.db")}, dir_.string());
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("## Pareto front"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("accuracy_middle"), std::string::npos) << md.out;
  EXPECT_NE(md.err.find("quickstart-synthetic-front.svg"), std::string::npos) << md.err;
  {
    std::ifstream plot(path("quickstart-synthetic-front.svg"));
    const std::string svg((std::istreambuf_iterator<char>(plot)), {});
    EXPECT_NE(svg.find("<polyline"), std::string::npos) << svg;
    EXPECT_NE(svg.find("logprob_end"), std::string::npos) << "axis label";
  }
  const Finished js = run_ga_run({"report", path("results.db"), "--format", "json"}, dir_.string());
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const auto report = nlohmann::json::parse(js.out);
  const auto& front = report["pareto_front"];
  ASSERT_FALSE(front.empty());
  for (const auto& member : front) EXPECT_EQ(member["objectives"].size(), 2u);
  std::size_t front_rows = 0;
  for (const auto& row : report["heldout"]) front_rows += row["role"].get<std::string>().rfind("front-", 0) == 0;
  bool best_on_front = false;
  for (const auto& member : front) best_on_front |= member["candidate"] == report["best"]["candidate"];
  EXPECT_EQ(front_rows, front.size() - (best_on_front ? 1 : 0));
  EXPECT_EQ(report["generations"].size(), 4u);
}

}  // namespace
}  // namespace midtune::testing
