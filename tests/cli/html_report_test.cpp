// `ga-run report --format html` read as a person reads it: in a real browser.
// Debian's chromium (installed by scripts/test.sh) renders the report of a
// finished synthetic search headless: the DOM it parsed must hold every
// section and plot with the run's data (a point per stored generation, a
// line per held-out role, a front for nsga2), and its screenshot must not be
// blank. Skipped where chromium is missing, except under CI=true.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/browser.hpp"
#include "tests/cli/results_db.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"

namespace midtune {
namespace {

using testing::count_of;
using testing::query_rows;
using testing::run_ga_run;

class HtmlReport : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    browser_ = testing::chromium();
    if (browser_.empty()) {
      if (testing::in_ci()) FAIL() << "chromium not found; CI=true: scripts/test.sh installs it";
      GTEST_SKIP() << "chromium not found (apt-get install chromium; scripts/test.sh does it)";
    }
  }
  // Runs `yaml` to its end (search and held-out step) and writes its HTML report.
  std::string run_and_report(const std::string& name, const std::string& yaml) {
    std::ofstream(path(name + ".yaml")) << yaml;
    const auto run = run_ga_run({path(name + ".yaml"), "--quiet"}, dir_.string());
    EXPECT_EQ(run.exit_code, 0) << run.err;
    const auto report = run_ga_run({"report", path("results.db"), "--experiment", name, "--format", "html", "--out",
                                    path(name + ".html")},
                                   dir_.string());
    EXPECT_EQ(report.exit_code, 0) << report.err;
    return path(name + ".html");
  }
  std::string render(const std::string& html, const std::string& screenshot) {
    return testing::render(browser_, html, screenshot, dir_.string());
  }
  std::string browser_;
};

TEST_F(HtmlReport, ARacedSearchRendersEverySectionWithItsData) {
  const std::string name = "html-lpes";
  const std::string html = run_and_report(name, "name: " + name + R"(
seed: 21
backend: {kind: synthetic-test-double, layers: 12, heads: 4, noise: 0.05}
dataset: {kind: kv, pairs: 6, gold_positions: [0.0, 0.25, 0.5, 0.75, 1.0], search_samples: 12,
          heldout_samples: 12, metric: teacher_forced}
objective:
  kind: lpes
  lpes: {curve: bezier, degree: 3}
search:
  strategy: ga
  racing: {first: 4, step: 4}
  ga: {population: 8, parents: 4, generations: 4, mutants: 3, crossovers: 1}
)");
  const std::string dom = render(html, path("shot.png"));
  ASSERT_NE(dom.find("</html>"), std::string::npos) << "chromium did not parse the page";
  for (const char* section : {"experiment", "answer", "fitness", "best", "heldout", "comparisons"})
    EXPECT_NE(dom.find(std::string("<section id=\"") + section + "\""), std::string::npos) << section;
  EXPECT_EQ(dom.find("<section id=\"pareto\""), std::string::npos) << "a ga search has no front";

  const std::string generations = query_rows(path("results.db"), "SELECT count(*) FROM generations").at(0);
  EXPECT_EQ(std::to_string(count_of(dom, "class=\"gen-best\"")), generations);
  EXPECT_EQ(std::to_string(count_of(dom, "class=\"gen-mean\"")), generations);
  const std::string raced =
      query_rows(path("results.db"), "SELECT count(DISTINCT generation) FROM individuals WHERE raced_samples IS NOT NULL")
          .at(0);
  EXPECT_EQ(std::to_string(count_of(dom, "class=\"gen-raced\"")), raced) << "racing drops are marked per generation";
  const std::string roles = query_rows(path("results.db"), "SELECT count(DISTINCT role) FROM heldout_results").at(0);
  EXPECT_EQ(std::to_string(count_of(dom, "class=\"role-line\"")), roles);
  EXPECT_EQ(count_of(dom, "class=\"best-scales\""), 1u) << "the best curve is drawn";
  EXPECT_EQ(count_of(dom, "class=\"pi-scale\""), 1u) << "beside PI's constant";
  EXPECT_NE(dom.find("synthetic-test-double"), std::string::npos) << "the model it ran on";

  EXPECT_TRUE(testing::screenshot_has_content(path("shot.png")));
}

TEST_F(HtmlReport, AParetoSearchDrawsItsFront) {
  const std::string name = "html-pareto";
  const std::string html = run_and_report(name, "name: " + name + R"(
seed: 22
backend: {kind: synthetic-test-double, layers: 12, heads: 4, noise: 0.05}
dataset: {kind: kv, pairs: 6, gold_positions: [0.0, 0.5, 1.0], search_samples: 6, heldout_samples: 6,
          metric: teacher_forced}
objective:
  kind: lpes
  lpes: {curve: bezier, degree: 2}
search:
  strategy: nsga2
  objectives: [accuracy_middle, neg_gap]
  nsga2: {population: 8, generations: 3}
)");
  const std::string dom = render(html, path("shot.png"));
  ASSERT_NE(dom.find("<section id=\"pareto\""), std::string::npos);
  const auto front = nlohmann::json::parse(
      run_ga_run({"report", path("results.db"), "--experiment", name, "--format", "json"}, dir_.string()).out);
  // One row per front member in the front's table, and the chosen (held-out) ones marked.
  const std::size_t members = front.at("pareto_front").size();
  ASSERT_GT(members, 0u);
  const auto section = dom.substr(dom.find("<section id=\"pareto\""));
  EXPECT_EQ(count_of(section, "<tr>"), members + 1) << "header + one row per member";
  EXPECT_GT(count_of(section, "held-out"), 0u);
  EXPECT_NE(section.find("<polyline"), std::string::npos) << "the front is drawn";
  EXPECT_EQ(count_of(section, "class=\"front-point"), members) << "a marker per member";
  const std::string chosen =
      query_rows(path("results.db"), "SELECT count(*) FROM heldout_results WHERE role GLOB 'front-*'").at(0);
  EXPECT_EQ(std::to_string(count_of(section, "class=\"front-point held-out\"")), chosen);
}

}  // namespace
}  // namespace midtune
