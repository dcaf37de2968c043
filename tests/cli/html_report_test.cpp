// `ga-run report --format html` read as a person reads it: in a real browser.
// Debian's chromium (installed by scripts/test.sh) renders the report of a
// finished synthetic search headless: the DOM it parsed must hold every
// section and plot with the run's data (a point per stored generation, a
// line per held-out role, a front for nsga2), and its screenshot must not be
// blank. Skipped where chromium is missing, except under CI=true.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/results_db.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using testing::query_rows;
using testing::run_ga_run;

std::string chromium() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin"})
    for (const char* name : {"chromium", "chromium-browser"})
      if (fs::exists(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  return "";
}

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint32_t big_endian(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// The distinct colours of an 8-bit RGB or RGBA, non-interlaced PNG (what
// chromium writes), decoded with zlib and the five PNG row filters; empty
// for anything else.
std::set<std::uint32_t> png_colours(const std::vector<unsigned char>& png, std::size_t& pixels) {
  static const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (png.size() < 33 || std::memcmp(png.data(), kSignature, 8) != 0) return {};
  std::uint32_t width = 0, height = 0;
  int channels = 0;
  std::vector<unsigned char> compressed;
  for (std::size_t at = 8; at + 12 <= png.size();) {
    const std::uint32_t length = big_endian(&png[at]);
    const std::string type(reinterpret_cast<const char*>(&png[at + 4]), 4);
    if (at + 12 + length > png.size()) return {};
    const unsigned char* data = &png[at + 8];
    if (type == "IHDR") {
      width = big_endian(data);
      height = big_endian(data + 4);
      if (data[8] != 8 || data[12] != 0) return {};  // 8 bits, not interlaced
      channels = data[9] == 6 ? 4 : data[9] == 2 ? 3 : 0;
    } else if (type == "IDAT") {
      compressed.insert(compressed.end(), data, data + length);
    }
    at += 12 + length;
  }
  if (channels == 0 || width == 0) return {};
  const std::size_t stride = std::size_t{width} * channels;
  std::vector<unsigned char> raw((stride + 1) * height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, compressed.data(), compressed.size()) != Z_OK || raw_size != raw.size()) return {};
  std::vector<unsigned char> previous(stride, 0), row(stride);
  std::set<std::uint32_t> colours;
  for (std::uint32_t y = 0; y < height; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* in = &raw[y * (stride + 1) + 1];
    for (std::size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<std::size_t>(channels) ? row[x - channels] : 0, b = previous[x],
                c = x >= static_cast<std::size_t>(channels) ? previous[x - channels] : 0;
      int predictor = 0;
      if (filter == 1) predictor = a;
      else if (filter == 2) predictor = b;
      else if (filter == 3) predictor = (a + b) / 2;
      else if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      row[x] = static_cast<unsigned char>(in[x] + predictor);
    }
    for (std::size_t x = 0; x < stride; x += channels)
      colours.insert((std::uint32_t{row[x]} << 16) | (std::uint32_t{row[x + 1]} << 8) | row[x + 2]);
    previous = row;
  }
  pixels = std::size_t{width} * height;
  return colours;
}

class HtmlReport : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    browser_ = chromium();
    if (browser_.empty()) {
      if (in_ci()) FAIL() << "chromium not found; CI=true: scripts/test.sh installs it";
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
  // What chromium parsed (its DOM, serialised), and a screenshot.
  std::string render(const std::string& html, const std::string& screenshot) {
    const std::string common = "timeout 60 " + browser_ +
                               " --headless --disable-gpu --no-sandbox --hide-scrollbars --user-data-dir=" +
                               path("chromium-profile") + " --window-size=1000,2400 ";
    const std::string dom = path("dom.html");
    EXPECT_EQ(std::system((common + "--dump-dom file://" + html + " > " + dom + " 2>/dev/null").c_str()), 0);
    EXPECT_EQ(std::system((common + "--screenshot=" + screenshot + " file://" + html + " > /dev/null 2>&1").c_str()), 0);
    std::ifstream in(dom);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
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

  std::size_t pixels = 0;
  const std::set<std::uint32_t> colours = png_colours(read_bytes(path("shot.png")), pixels);
  EXPECT_GT(pixels, 0u) << "not a PNG chromium could write";
  EXPECT_GT(colours.size(), 20u) << "the screenshot is blank";
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
}

}  // namespace
}  // namespace midtune
