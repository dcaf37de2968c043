// experiments/findings/findings.sh, the driver of every findings run (and of
// scripts/gpu_findings.sh on a lent GPU, where a wrong pick wastes the
// session): calibrate evaluates a set's baseline files, table pools their
// curve, check pairs one intervention with it at every position, --pick names the first set given whose curve is
// complete and whose middle is lost, search runs a set's method files to their held-out rows (stopping at one that
// fails, or going past it with --keep-going), and a second findings.sh on the same results file is refused at once. Run
// on a copy of the script beside cut-down files on the test model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/model_path.hpp"
#include "tests/test_paths.hpp"

namespace midtune::testing {
namespace {

namespace fs = std::filesystem;

class FindingsScript : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    if (test_model_path().empty()) GTEST_SKIP() << "model not found (set MIDTUNE_MODEL)";
    fs::create_directories(path("findings"));
    for (const char* file : {"findings.sh", "baseline_slice.py"}) {
      fs::copy_file(source_dir() + "/experiments/findings/" + file, path(std::string("findings/") + file));
    }
  }
  // A cut-down findings file beside the script: 3 pairs, the test model,
  // results in DIR/results/DB.
  void write(const std::string& file, const std::string& name, const std::string& db, const std::string& rest,
             int seed = 1, const std::string& device = "device: cpu") {
    std::ofstream(path("findings/" + file))
        << "name: " << name << "\nseed: " << seed << "\nbackend: {kind: engine, model: " << test_model_path().string()
        << ", " << device << ", threads: 2}\n"
        << "dataset:\n  kind: kv\n  pairs: 3\n  metric: teacher_forced\n  prime_answer: true\n"
        << rest << "storage:\n  db: ../results/" << db << "\n";
  }
  Finished findings(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/env", "GA_RUN=" + ga_run_path(), path("findings/findings.sh")});
    return run_process(args, dir_.string());
  }
};

TEST_F(FindingsScript, CalibratePickAndSearchAsTheGpuRunUsesThem) {
  const std::string baseline =
      "  gold_positions: [0.0, 0.5, 1.0]\n  search_samples: 1\n  heldout_samples: 4\n"
      "objective: {kind: lpes, weights: {beginning: 0.2, middle: 0.3, end: 0.5}}\n";
  write("short-baseline.yaml", "short-baseline", "calibration.db", baseline);
  // Never calibrated. Another seed: the same items would be answered from the
  // results file, whatever the file's name.
  write("long-baseline.yaml", "long-baseline", "calibration.db", baseline, 2);
  write("short-siw.yaml", "short-siw", "short.db",
        "  gold_positions: [0.0, 0.5, 1.0]\n  search_samples: 1\n  heldout_samples: [1, 2, 1]\n"
        "objective:\n  kind: siw\n  weights: {beginning: 0.2, middle: 0.3, end: 0.5}\n  fitness: gold_logprob\n"
        "  siw: {genes: {alpha_dense: {min: 0.5, max: 1.5, step: 0.5, start: 1.0}, first_layer: 10, last_layer: 20}}\n"
        "search: {strategy: random, random: {samples: 2}}\n");

  const Finished calibrate = findings({"calibrate", "short"});
  ASSERT_EQ(calibrate.exit_code, 0) << calibrate.err;
  EXPECT_TRUE(fs::exists(path("results/snapshots/calibration-after-short.db"))) << calibrate.out;

  // check: one intervention on the calibration's items, paired item by
  // item with the baseline curve, every position (a method's searches see
  // three); an intervention file that is not there is refused by name.
  std::ofstream(path("moses.json")) << R"({"position_map": {"kind": "moses", "gap": 1000}})";
  const Finished check = findings({"check", path("moses.json"), "short"});
  ASSERT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_NE(check.out.find(R"(check: {"position_map": {"gap": 1000.0, "kind": "moses"}} against the baseline)"),
            std::string::npos)
      << check.out;
  // Teacher-forced: each position's paired gold log-probability change too.
  const std::regex check_row(
      R"(\n\s*0\.5\s+\d/4\s+\d/4\s+[-+]\d+\.\d\s+\d/\d\s+[0-9.e-]+\s+[-+]\d+\.\d\d \[[-+]\d+\.\d\d, [-+]\d+\.\d\d\]\n)");
  EXPECT_TRUE(std::regex_search(check.out, check_row)) << check.out;
  EXPECT_NE(check.out.find("gold log-p change [95 %]"), std::string::npos) << check.out;
  // The rows' results file, copied once the check's evaluations are in.
  const std::regex check_snapshot(
      R"(snapshot \S*/results/snapshots/calibration-after-check-moses-[0-9a-f]{8}\.db: sha256 [0-9a-f]{64})");
  EXPECT_TRUE(std::regex_search(check.out, check_snapshot)) << check.out;
  const std::regex between(R"(between the ends: \d+/\d+ with it, \d+/\d+ without, gold log-p change [-+]\d)");
  EXPECT_TRUE(std::regex_search(check.out, between)) << check.out;
  // A file that leaves fields at their defaults (here Ms-PoE's seed) is
  // paired with the full form ga-run stores, which the header then shows.
  std::ofstream(path("mspoe.json"))
      << R"({"mspoe": {"min_ratio": 1.2, "max_ratio": 1.8, "first_layer": 2, "alpha": 3.0, "order": "awareness"}})";
  const Finished partial = findings({"check", path("mspoe.json"), "short"});
  ASSERT_EQ(partial.exit_code, 0) << partial.out << partial.err;
  EXPECT_NE(partial.out.find(R"("seed": 0)"), std::string::npos) << partial.out;
  EXPECT_TRUE(std::regex_search(partial.out, check_row)) << partial.out;
  const Finished no_file = findings({"check", path("none.json"), "short"});
  EXPECT_EQ(no_file.exit_code, 2);
  EXPECT_NE(no_file.err.find("no intervention file"), std::string::npos) << no_file.err;

  // --pick: the first set given that is complete and loses the middle. The
  // uncalibrated set, given first, is passed over; whether the test model's
  // curve qualifies is read from the table it prints (middle at 70 % or
  // less and 15 points under the better end).
  const Finished pick = findings({"table", "--pick", "long", "short"});
  std::map<double, double> accuracy;
  const std::regex row(R"(^\s*([0-9.]+)\s+\d+/4\s+([0-9.]+)%)");
  std::istringstream lines(pick.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) accuracy[std::stod(m[1])] = std::stod(m[2]);
  }
  ASSERT_EQ(accuracy.size(), 3u) << pick.out << pick.err;
  const double middle = accuracy[0.5], better_end = std::max(accuracy[0.0], accuracy[1.0]);
  const bool lost = middle <= 70 && better_end - middle >= 15;
  EXPECT_NE(pick.out.find("long: 0 of 1 files evaluated"), std::string::npos) << pick.out;
  EXPECT_NE(pick.out.find(lost ? "pick: short\n" : "pick: none\n"), std::string::npos) << pick.out;
  EXPECT_EQ(pick.exit_code, lost ? 0 : 1) << pick.err;
  const Finished none = findings({"table", "--pick", "long"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.out.find("pick: none"), std::string::npos) << none.out;

  const Finished search = findings({"search", "short", "siw"});
  ASSERT_EQ(search.exit_code, 0) << search.err;
  EXPECT_NE(search.out.find("short-siw.yaml done"), std::string::npos) << search.out;
  EXPECT_NE(search.out.find("held-out"), std::string::npos) << search.out;

  // The step's snapshot: a copy of the results file as the step left it,
  // with its sha256, which a later run keeps rather than overwrites (a
  // recorded row names it).
  const std::string snapshot = path("results/snapshots/short-after-siw.db");
  const std::regex taken_line(R"(snapshot (\S+/snapshots/short-after-siw\.db): sha256 ([0-9a-f]{64})\n)");
  std::smatch taken;
  ASSERT_TRUE(std::regex_search(search.out, taken, taken_line)) << search.out;
  const Finished hashed = run_process({"/usr/bin/sha256sum", snapshot}, dir_.string());
  EXPECT_EQ(hashed.out.substr(0, 64), taken[2].str());
  EXPECT_TRUE(fs::equivalent(taken[1].str(), snapshot)) << taken[1];
  const Finished rows = run_process(
      {ga_run_path(), "query", snapshot, "SELECT count(*) > 0 AS stored FROM sample_results"}, dir_.string());
  EXPECT_EQ(rows.exit_code, 0) << rows.err;
  EXPECT_NE(rows.out.find("| 1 "), std::string::npos) << rows.out;
  const auto written = fs::last_write_time(snapshot);
  const Finished again = findings({"search", "short", "siw"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("snapshot " + taken[1].str() + " kept: sha256 " + taken[2].str()), std::string::npos)
      << again.out;
  EXPECT_EQ(fs::last_write_time(snapshot), written);

  // A method that fails (here its file names a model that is not there; on
  // a GPU, one the device cannot run) stops the search, naming it; with
  // --keep-going the methods after it still run and the exit says it failed.
  std::ofstream(path("findings/short-mspoe.yaml"))
      << "name: short-mspoe\nbackend: {kind: engine, model: " << path("no-such-model.gguf") << "}\n"
      << "dataset: {kind: kv, pairs: 3, search_samples: 1, heldout_samples: 1}\n"
      << "objective: {kind: mspoe}\nstorage:\n  db: ../results/short.db\n";
  const Finished stops = findings({"search", "short"});
  EXPECT_EQ(stops.exit_code, 1);
  EXPECT_NE(stops.err.find("short-mspoe.yaml failed"), std::string::npos) << stops.err;
  EXPECT_EQ(stops.out.find("short-siw.yaml"), std::string::npos) << stops.out;
  const Finished keeps_going = findings({"search", "--keep-going", "short"});
  EXPECT_EQ(keeps_going.exit_code, 1);
  EXPECT_NE(keeps_going.out.find("short-siw.yaml done"), std::string::npos) << keeps_going.out;
  EXPECT_NE(keeps_going.err.find("done, but these failed: short-mspoe.yaml"), std::string::npos) << keeps_going.err;
  EXPECT_FALSE(fs::exists(path("results/snapshots/short-after-mspoe.db"))) << "a failed step's snapshot";

  // A file whose results file cannot be read off it is refused before
  // anything runs or any lock file is made.
  std::ofstream(path("findings/nodb-baseline.yaml")) << "name: nodb-baseline\nstorage: {db: x.db}\n";
  const Finished nodb = findings({"calibrate", "nodb"});
  EXPECT_EQ(nodb.exit_code, 2);
  EXPECT_NE(nodb.err.find("nodb-baseline.yaml names no storage.db"), std::string::npos) << nodb.err;
  EXPECT_FALSE(fs::exists(".lock")) << "a lock file made where the script ran";

  // One findings.sh per results file: a second is refused, naming the lock.
  const pid_t holder = spawn_process({"/usr/bin/flock", path("results/short.db.lock"), "/bin/sleep", "30"},
                                     path("holder.out"), path("holder.err"));
  for (int i = 0; i < 100 && !fs::exists(path("results/short.db.lock")); ++i) usleep(20000);
  usleep(200000);  // flock has the lock once it runs sleep
  const Finished second = findings({"search", "short", "siw"});
  kill(holder, SIGTERM);
  waitpid(holder, nullptr, 0);
  EXPECT_EQ(second.exit_code, 3);
  EXPECT_NE(second.err.find("another findings.sh holds"), std::string::npos) << second.err;
}

// A machine without the files' device calibrates and searches on its own
// (--device cpu on files for a GPU), and a set evaluated under
// two precisions of the same weights (a CPU calibration, later a GPU's)
// pools into one curve from each file's latest complete evaluation, where
// two models would be refused.
TEST_F(FindingsScript, CalibrateOnAnotherDeviceAndPoolAcrossPrecisions) {
  const std::string baseline =
      "  gold_positions: [0.0, 0.5, 1.0]\n  search_samples: 1\n  heldout_samples: 2\n"
      "objective: {kind: lpes, weights: {beginning: 0.2, middle: 0.3, end: 0.5}}\n";
  write("gpu-baseline.yaml", "gpu-baseline", "calibration.db", baseline, 1, "device: cuda, attention: flash");
  const Finished on_cpu = findings({"calibrate", "--device", "cpu", "gpu"});
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.out << on_cpu.err;
  const Finished native = findings({"table", "gpu"});
  ASSERT_EQ(native.exit_code, 0) << native.err;
  EXPECT_NE(native.out.find("gpu: 1 of 1 files evaluated"), std::string::npos) << native.out;
  EXPECT_NE(native.out.find("; precision native)"), std::string::npos) << native.out;

  write("gpu-baseline.yaml", "gpu-baseline", "calibration.db", baseline, 1, "device: cpu, precision: fp32");
  const Finished fp32 = findings({"calibrate", "gpu"});
  ASSERT_EQ(fp32.exit_code, 0) << fp32.out << fp32.err;
  const Finished latest = findings({"table", "gpu"});
  ASSERT_EQ(latest.exit_code, 0) << latest.err;
  EXPECT_NE(latest.out.find("; precision fp32)"), std::string::npos) << latest.out;
  EXPECT_NE(latest.out.find("gpu: 1 of 1 files evaluated"), std::string::npos) << latest.out;

  // A search moves too; the device is part of it, so a resume that does not
  // name it again does not continue under the file's (on a machine without
  // CUDA it cannot start, on one with CUDA its search differs).
  write("gpu-siw.yaml", "gpu-siw", "gpu.db",
        "  gold_positions: [0.0, 0.5, 1.0]\n  search_samples: 1\n  heldout_samples: 1\n"
        "objective:\n  kind: siw\n  weights: {beginning: 0.2, middle: 0.3, end: 0.5}\n  fitness: gold_logprob\n"
        "  siw: {genes: {alpha_dense: {min: 0.5, max: 1.5, step: 0.5, start: 1.0}, first_layer: 10, last_layer: 20}}\n"
        "search: {strategy: random, random: {samples: 2}}\n",
        1, "device: cuda, attention: flash");
  const Finished search = findings({"search", "--keep-going", "--device", "cpu", "gpu", "siw"});
  ASSERT_EQ(search.exit_code, 0) << search.out << search.err;
  EXPECT_NE(search.out.find("held-out"), std::string::npos) << search.out;
  const Finished again = findings({"search", "--device", "cpu", "gpu", "siw"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("'gpu-siw' is already complete"), std::string::npos) << again.out;
  const Finished without = findings({"search", "gpu", "siw"});
  EXPECT_EQ(without.exit_code, 1) << without.out;
  EXPECT_EQ(without.out.find("already complete"), std::string::npos) << without.out;

  const Finished bad = findings({"calibrate", "--device", "tpu", "gpu"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("backend.device: cannot run on tpu: the devices are cpu and cuda"), std::string::npos)
      << bad.err;
}

// A set on a Lost-in-the-Middle file (here the fixture in its format) pools
// its own items, apart from a generated set of the same length and seed in
// the same results file; an unfinished one shows what it has so far.
TEST_F(FindingsScript, TableTellsAFileSetFromAGeneratedOne) {
  const std::string baseline =
      "  gold_positions: [0.0, 0.5, 1.0]\n  search_samples: 1\n  heldout_samples: 2\n"
      "objective: {kind: lpes, weights: {beginning: 0.2, middle: 0.3, end: 0.5}}\n";
  write("litm-baseline.yaml", "litm-baseline", "calibration.db",
        "  file: " + source_dir() + "/tests/datasets/fixtures/kv-retrieval-6_keys-fixture.jsonl.gz\n" + baseline);
  write("gen-baseline.yaml", "gen-baseline", "calibration.db", baseline);
  const Finished litm = findings({"calibrate", "litm"});
  ASSERT_EQ(litm.exit_code, 0) << litm.out << litm.err;
  const Finished both = findings({"table", "litm", "gen"});
  EXPECT_NE(both.out.find("litm: 1 of 1 files evaluated"), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("gen: 0 of 1 files evaluated"), std::string::npos) << both.out;
  const Finished gen = findings({"calibrate", "gen"});
  ASSERT_EQ(gen.exit_code, 0) << gen.out << gen.err;
  const Finished after = findings({"table", "gen"});
  EXPECT_NE(after.out.find("gen: 1 of 1 files evaluated"), std::string::npos) << after.out;

  // A calibration stopped part-way (here: the stored evaluation cut back to
  // 4 of its 6 prompts, as a kill between slices leaves it) is shown as
  // what it has so far, apart from the curve, which it never joins.
  const Finished cut =
      run_process({"/usr/bin/python3", "-c",
                   "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                   "e = c.execute(\"SELECT e.id FROM evaluations e WHERE dataset_slice LIKE '%source=generated;%' "
                   "AND dataset_slice LIKE '%split=heldout%'\").fetchone()[0]; "
                   "c.execute('UPDATE evaluations SET complete = 0 WHERE id = ?', (e,)); "
                   "c.execute('DELETE FROM sample_results WHERE rowid IN (SELECT rowid FROM sample_results "
                   "WHERE evaluation_id = ? LIMIT 2)', (e,)); c.commit()",
                   path("results/calibration.db")},
                  dir_.string());
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  const Finished so_far = findings({"table", "--pick", "gen"});
  EXPECT_NE(so_far.out.find("gen: 0 of 1 files evaluated"), std::string::npos) << so_far.out;
  EXPECT_NE(so_far.out.find("gen: so far, unfinished files: 4 of 6 prompts (not part of the curve)"), std::string::npos)
      << so_far.out;
  EXPECT_NE(so_far.out.find("pick: none"), std::string::npos) << so_far.out;
}

// A multi-document QA set (the nq-open-oracle fixture, other questions'
// gold documents as distractors, greedy answers) is found and pooled like a
// KV set: its slice names its documents and no primed answer, and the
// model's section holds a `kind` of its own that is not the dataset's.
TEST_F(FindingsScript, TablePoolsAMultiDocumentQaSet) {
  std::ofstream(path("findings/qa-baseline.yaml"))
      << "name: qa-baseline\nseed: 1\nbackend: {kind: engine, model: " << test_model_path().string()
      << ", device: cpu, threads: 2}\n"
      << "dataset:\n  kind: mdqa\n  file: " << source_dir()
      << "/tests/datasets/fixtures/nq-open-oracle-fixture.jsonl.gz\n  documents: 3\n"
         "  distractors: other-questions\n  gold_positions: [0.0, 0.5, 1.0]\n  search_samples: 1\n"
         "  heldout_samples: 2\n  metric: generate\n  max_new_tokens: 4\n"
         "objective: {kind: lpes, weights: {beginning: 0.2, middle: 0.3, end: 0.5}}\n"
         "storage:\n  db: ../results/calibration.db\n";
  const Finished calibrate = findings({"calibrate", "qa"});
  ASSERT_EQ(calibrate.exit_code, 0) << calibrate.out << calibrate.err;
  const Finished table = findings({"table", "qa"});
  ASSERT_EQ(table.exit_code, 0) << table.out << table.err;
  EXPECT_NE(table.out.find("qa: 1 of 1 files evaluated"), std::string::npos) << table.out;
  const std::regex row(R"(\n\s*0\.5\s+\d/2\s+[0-9.]+%)");
  EXPECT_TRUE(std::regex_search(table.out, row)) << table.out;
}

}  // namespace
}  // namespace midtune::testing
