// ga-run as a user runs it (a subprocess on a synthetic-test-double
// experiment): kill -9 at random moments and resume must end exactly like an
// uninterrupted run; an edited experiment is refused naming the change;
// `query` refuses writes and leaves the database byte-identical.
#include <gtest/gtest.h>

#include "tests/cli/temp_dir.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include <signal.h>

#include <nlohmann/json.hpp>

#include "schema/sqlite.hpp"
#include "tests/cli/results_db.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/test_paths.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using testing::Finished;
using testing::read_file;
using testing::run_ga_run;

std::string experiment_yaml(int generations, double latency_ms) {
  return testing::synthetic_lpes_experiment("resume-check", generations, latency_ms);
}

class GaRunIntegration : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(fs::exists(testing::ga_run_path())) << testing::ga_run_path();
  }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }

  // Rows of a query on a finished database, one string per row.
  static std::vector<std::string> rows(const std::string& db, const std::string& sql_text) {
    return testing::query_rows(db, sql_text);
  }
  // Runs `yaml` uninterrupted (reference.db), then kills it at random
  // moments and resumes it until it completes (killed.db); both must hold
  // the same individuals, best, checkpoints and committed work.
  void kill_and_resume_matches_uninterrupted(const std::string& yaml);
};

constexpr const char* kIndividuals =
    "SELECT candidate_id, generation, genome, genome_hash, origin, parents, printf('%.17g', fitness), cache_hit "
    "FROM individuals i JOIN experiments e ON e.id = i.experiment_id WHERE e.name = 'resume-check' "
    "ORDER BY candidate_id";
constexpr const char* kBest =
    "SELECT genome, printf('%.17g', fitness) FROM individuals ORDER BY fitness DESC, candidate_id LIMIT 1";
constexpr const char* kRaced =
    "SELECT candidate_id, raced_samples, e.complete, (SELECT count(*) FROM sample_results s WHERE s.evaluation_id = "
    "e.id) FROM individuals i JOIN evaluations e ON e.id = i.evaluation_id ORDER BY candidate_id";
constexpr const char* kGenerations =
    "SELECT generation, population, strategy_state, printf('%.17g', best_fitness) FROM generations ORDER BY generation";

TEST_F(GaRunIntegration, KilledAtRandomMomentsResumesToTheSameResult) {
  kill_and_resume_matches_uninterrupted(experiment_yaml(6, 4.0));
}

// Racing stores every slice's samples as it goes: kill -9 mid-race and the
// resumed run decides again from the same stored samples.
TEST_F(GaRunIntegration, RacingKilledAtRandomMomentsResumesToTheSameResult) {
  kill_and_resume_matches_uninterrupted(experiment_yaml(6, 4.0) + "  racing: {first: 2, step: 2, confidence: 0.8}\n");
  EXPECT_GT(std::stoi(rows(path("reference.db"), "SELECT count(*) FROM individuals WHERE raced_samples IS NOT NULL")[0]),
            0)
      << "the experiment races some children";
  EXPECT_EQ(rows(path("killed.db"), kRaced), rows(path("reference.db"), kRaced));
  const Finished status = run_ga_run({"status", path("killed.db")}, dir_.string());
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("passes saved by racing"), std::string::npos) << status.out;
}

void GaRunIntegration::kill_and_resume_matches_uninterrupted(const std::string& yaml) {
  write("exp.yaml", yaml);
  const auto start = std::chrono::system_clock::now();
  const Finished reference = run_ga_run({path("exp.yaml"), "--db", path("reference.db"), "--quiet"}, dir_.string());
  const double reference_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now() - start).count();
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  ASSERT_FALSE(rows(path("reference.db"), kIndividuals).empty());
  // When the reference run stored its first and its last individual, in ms
  // after it was started.
  const double unix_ms = std::chrono::duration<double, std::milli>(start.time_since_epoch()).count();
  auto stored_ms = [&](const char* which) {
    return std::stod(rows(path("reference.db"), std::string("SELECT (julianday(") + which +
                                                    "(created_at)) - 2440587.5) * 86400000.0 FROM individuals")[0]) -
           unix_ms;
  };
  const double first_ms = stored_ms("min"), last_ms = stored_ms("max");
  ASSERT_GT(first_ms, 0.0);
  const int reference_individuals = static_cast<int>(rows(path("reference.db"), kIndividuals).size());
  ASSERT_GE(reference_individuals, 8);
  const double per_individual_ms = (last_ms - first_ms) / reference_individuals;

  std::random_device device;
  const unsigned seed = device();
  std::mt19937 rng(seed);
  SCOPED_TRACE("kill-moment seed " + std::to_string(seed));
  auto uniform = [&](double low, double high) { return std::uniform_real_distribution<double>(low, high)(rng); };
  auto stored_individuals = [&] { return testing::stored_individuals(path("killed.db")); };
  // Kill points follow the run's progress, not wall-clock fractions of the
  // reference run (start-up and search take shares that vary with the
  // load): one kill during start-up, four after a random number of stored
  // individuals plus a random part of an evaluation (mid-evaluation, with
  // some stored), one after the last individual (held-out step, report),
  // then a run left to finish.
  struct KillPoint {
    int after_individuals;
    double then_ms;
  };
  std::vector<KillPoint> points = {{0, uniform(0, first_ms)}};
  // One target in each quarter of the search: four uniform draws may all
  // fall near the end, where a racing run stores the last children in a
  // burst and the kill lands after the search.
  constexpr int kQuarters = 4;
  for (int quarter = 0; quarter < kQuarters; ++quarter) {
    const int low = 1 + quarter * (reference_individuals - 1) / kQuarters;
    const int high = std::max(low, (quarter + 1) * (reference_individuals - 1) / kQuarters);
    points.push_back({std::uniform_int_distribution<int>(low, high)(rng), uniform(0, per_individual_ms)});
  }
  points.push_back({reference_individuals, uniform(0, std::max(1.0, reference_ms - last_ms))});

  int kills = 0, mid_search_kills = 0;
  bool completed = false;
  for (std::size_t attempt = 0; attempt <= points.size() && !completed; ++attempt) {
    const bool last_attempt = attempt == points.size();
    KillPoint point = last_attempt ? KillPoint{0, 0} : points[attempt];
    // A resumed run never goes back: aim past what is already stored.
    if (!last_attempt && point.after_individuals > 0)
      point.after_individuals = std::max(point.after_individuals, std::min(stored_individuals() + 1, reference_individuals));
    const std::string out = path("out.txt"), err = path("err.txt");
    const pid_t pid = testing::spawn_ga_run({path("exp.yaml"), "--db", path("killed.db"), "--quiet"}, out, err);
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed_ms = [](auto since) {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
    };
    std::optional<std::chrono::steady_clock::time_point> reached;
    if (point.after_individuals == 0) reached = t0;
    int status = 0;
    bool exited = false;
    while (!exited) {
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      // Normal: seconds; the bound catches a run that hangs.
      if (elapsed_ms(t0) > 120000) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        FAIL() << "ga-run still running after 120 s\n" << read_file(err);
      }
      if (!last_attempt) {
        const int stored = stored_individuals();
        if (!reached && stored >= point.after_individuals) reached = std::chrono::steady_clock::now();
        // The start-up kill is timed from the reference run, whose start-up
        // may have been slower (a cold page cache): once this run has stored
        // its first individual, start-up is over, so kill now rather than let
        // it run on past the whole search.
        const bool startup_over = point.after_individuals == 0 && stored > 0;
        if (reached && (startup_over || elapsed_ms(*reached) >= point.then_ms)) {
          kill(pid, SIGKILL);
          waitpid(pid, &status, 0);
          exited = true;
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    if (WIFSIGNALED(status)) {
      ++kills;
      const int n = stored_individuals();
      std::printf("kill %d, %.1f ms after %d individuals: %d stored\n", kills, point.then_ms,
                  point.after_individuals, n);
      if (n > 0 && n < reference_individuals) ++mid_search_kills;
      continue;
    }
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0) << read_file(err);
    completed = true;
  }
  ASSERT_TRUE(completed);
  // The kills aimed mid-search landed there (a delay may carry the last one
  // past the final individual).
  EXPECT_GE(mid_search_kills, 3) << kills << " kills, too few mid-search";
  RecordProperty("kills", kills);

  EXPECT_EQ(rows(path("killed.db"), kIndividuals), rows(path("reference.db"), kIndividuals));
  EXPECT_EQ(rows(path("killed.db"), kBest), rows(path("reference.db"), kBest));
  EXPECT_EQ(rows(path("killed.db"), kGenerations), rows(path("reference.db"), kGenerations));
  // Work committed across all the killed runs equals the uninterrupted run's:
  // only the evaluation in flight at each kill was lost (and redone).
  EXPECT_EQ(rows(path("killed.db"), "SELECT sum(evaluations) FROM runs"),
            rows(path("reference.db"), "SELECT sum(evaluations) FROM runs"));
  EXPECT_EQ(rows(path("killed.db"), "SELECT count(*) FROM evaluations WHERE status = 'ok'"),
            rows(path("reference.db"), "SELECT count(*) FROM evaluations WHERE status = 'ok'"));
}

// SIGTERM (Slurm, kill) and SIGINT (Ctrl-C) stop a run after the evaluation
// in flight with exit 75: the file intact, the lease released, and the same
// command resumes to the rows of an uninterrupted run.
TEST_F(GaRunIntegration, SigtermOrSigintStopsResumablyAndTheRerunEndsLikeAnUninterruptedRun) {
  // 24 prompts of 5 ms: about 0.12 s per evaluation, 34 evaluations.
  std::string yaml = experiment_yaml(4, 0);
  yaml.replace(yaml.find("latency_ms: "), 0, "prompt_latency_ms: 5, ");
  write("exp.yaml", yaml);
  const Finished reference = run_ga_run({path("exp.yaml"), "--db", path("reference.db"), "--quiet"}, dir_.string());
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const int all_generations = testing::stored_generations(path("reference.db"));
  ASSERT_EQ(all_generations, 5);

  const std::string out = path("out.txt"), err = path("err.txt");
  int stopped_at = 0;
  for (const auto& [stop_signal, after] : {std::pair{SIGTERM, 1}, std::pair{SIGINT, 3}}) {
    SCOPED_TRACE(stop_signal == SIGTERM ? "SIGTERM" : "SIGINT");
    const pid_t pid = testing::spawn_ga_run({path("exp.yaml"), "--db", path("stopped.db")}, out, err);
    // Normal: under a second to the first checkpoint; the bound catches a hang.
    const bool reached = testing::wait_for_generations(path("stopped.db"), after, 60);
    kill(pid, stop_signal);
    bool timed_out = false;
    // Normal: one evaluation (0.12 s) to stop; the bound catches a run that ignores the signal.
    const Finished stopped = testing::wait_bounded(pid, out, err, 60, &timed_out);
    ASSERT_TRUE(reached) << "no checkpoint " << after << " within 60 s\n" << stopped.err;
    ASSERT_FALSE(timed_out) << "still running 60 s after the signal\n" << stopped.err;
    EXPECT_EQ(stopped.exit_code, 75) << stopped.err;
    EXPECT_NE(stopped.err.find(stop_signal == SIGTERM ? "SIGTERM: stopped" : "SIGINT: stopped"), std::string::npos)
        << stopped.err;
    EXPECT_NE(stopped.err.find("run the same command to resume"), std::string::npos) << stopped.err;
    EXPECT_EQ(rows(path("stopped.db"), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
    // The lease is gone, not left for the next run to find dead.
    EXPECT_TRUE(rows(path("stopped.db"), "SELECT pid FROM experiment_leases").empty());
    // Stopped mid-search: the signal came with `after` checkpoints stored and
    // the run stops before its next evaluation, far from the end.
    stopped_at = testing::stored_generations(path("stopped.db"));
    EXPECT_GE(stopped_at, after);
    EXPECT_LT(stopped_at, all_generations);
  }
  const Finished resumed = run_ga_run({path("exp.yaml"), "--db", path("stopped.db"), "--quiet"}, dir_.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (const auto& [what, sql] : testing::stored_rows())
    EXPECT_EQ(rows(path("stopped.db"), sql), rows(path("reference.db"), sql)) << what;
  RecordProperty("generations_at_second_stop", stopped_at);
}

// The held-out step stops too, between the slices it stores (16 prompts):
// a signal during a long held-out step (hundreds of long prompts on a
// real model) ends the run within a slice, not after every row, and the
// same command completes the rows an uninterrupted run stores.
TEST_F(GaRunIntegration, SigtermDuringTheHeldOutStepStopsBetweenItsSlices) {
  // One generation; the held-out step's three rows (best, baseline, PI at
  // the mean scale) of 72 prompts of 10 ms each run in slices of 16.
  std::string yaml = experiment_yaml(1, 0);
  yaml.replace(yaml.find("latency_ms: "), 0, "prompt_latency_ms: 10, ");
  yaml.replace(yaml.find("heldout_samples: 8"), 18, "heldout_samples: 24");
  write("exp.yaml", yaml);
  const Finished reference = run_ga_run({path("exp.yaml"), "--db", path("reference.db"), "--quiet"}, dir_.string());
  ASSERT_EQ(reference.exit_code, 0) << reference.err;

  const std::string out = path("out.txt"), err = path("err.txt");
  const pid_t pid = testing::spawn_ga_run({path("exp.yaml"), "--db", path("stopped.db")}, out, err);
  const auto heldout_samples = [&] {
    return testing::count_or_zero(path("stopped.db"),
                                  "SELECT count(*) FROM sample_results s JOIN evaluations e ON e.id = s.evaluation_id "
                                  "WHERE e.dataset_slice LIKE '%split=heldout%'");
  };
  // Normal: a few seconds to the first held-out slice; the bound catches a hang.
  const auto start = std::chrono::steady_clock::now();
  while (heldout_samples() < 16 && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGTERM);
  bool timed_out = false;
  const Finished stopped = testing::wait_bounded(pid, out, err, 60, &timed_out);
  ASSERT_FALSE(timed_out) << "still running 60 s after the signal\n" << stopped.err;
  EXPECT_EQ(stopped.exit_code, 75) << stopped.err;
  EXPECT_NE(stopped.err.find("SIGTERM: stopped with "), std::string::npos) << stopped.err;
  EXPECT_NE(stopped.err.find("run the same command to resume"), std::string::npos) << stopped.err;
  // Stopped inside the step: some of its 216 prompts stored, not all.
  const int stored = heldout_samples();
  EXPECT_GE(stored, 16);
  EXPECT_LT(stored, 3 * 72);
  EXPECT_EQ(rows(path("stopped.db"), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});

  const Finished resumed = run_ga_run({path("exp.yaml"), "--db", path("stopped.db"), "--quiet"}, dir_.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (const auto& [what, sql] : testing::stored_rows())
    EXPECT_EQ(rows(path("stopped.db"), sql), rows(path("reference.db"), sql)) << what;
  EXPECT_EQ(rows(path("stopped.db"), "SELECT role, evaluation_id IS NOT NULL FROM heldout_results ORDER BY role"),
            rows(path("reference.db"), "SELECT role, evaluation_id IS NOT NULL FROM heldout_results ORDER BY role"));
}

TEST_F(GaRunIntegration, EditedExperimentIsRefusedNamingTheChange) {
  write("exp.yaml", experiment_yaml(2, 0));
  ASSERT_EQ(run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string()).exit_code, 0);
  ASSERT_TRUE(fs::exists(path("results.db"))) << "default database beside the experiment file";
  write("exp.yaml", experiment_yaml(3, 0));
  const Finished refused = run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("search.ga.generations"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--new-experiment"), std::string::npos) << refused.err;
  // latency_ms does not change the search: resuming (complete) is accepted.
  write("exp.yaml", experiment_yaml(2, 1.0));
  EXPECT_EQ(run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string()).exit_code, 0);
  // A fresh experiment in the same database runs, entirely from the cache for generation 0's seed.
  write("exp.yaml", experiment_yaml(3, 0));
  const Finished fresh = run_ga_run({path("exp.yaml"), "--quiet", "--new-experiment", "longer"}, dir_.string());
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(rows(path("results.db"), "SELECT name FROM experiments ORDER BY id"),
            (std::vector<std::string>{"resume-check", "longer"}));
  EXPECT_EQ(rows(path("results.db"),
                 "SELECT sum(cache_hit) > 0 FROM individuals i JOIN experiments e ON e.id = i.experiment_id "
                 "WHERE e.name = 'longer'"),
            (std::vector<std::string>{"1"}))
      << "the same interventions on the same data come from the cache";
}

TEST_F(GaRunIntegration, QueryRefusesWritesAndLeavesTheDatabaseUnchanged) {
  write("exp.yaml", experiment_yaml(1, 0));
  ASSERT_EQ(run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string()).exit_code, 0);
  const std::string db = path("results.db");
  const std::string before = read_file(db);
  ASSERT_FALSE(before.empty());
  for (const std::string statement :
       {"INSERT INTO experiments (name, config_text, config_hash, search_config) VALUES ('x', '', '', '{}')",
        "DELETE FROM individuals", "UPDATE individuals SET fitness = 0", "DROP TABLE evaluations",
        "CREATE TABLE t (x)", "PRAGMA user_version = 9", "SELECT 1; DELETE FROM individuals"}) {
    const Finished f = run_ga_run({"query", db, statement}, dir_.string());
    EXPECT_EQ(f.exit_code, 1) << statement << "\n" << f.err;
    EXPECT_FALSE(f.err.empty()) << statement;
    EXPECT_EQ(read_file(db), before) << statement;
  }
  const Finished select = run_ga_run({"query", db, "SELECT count(*) AS n FROM individuals"}, dir_.string());
  EXPECT_EQ(select.exit_code, 0) << select.err;
  EXPECT_NE(select.out.find("| n "), std::string::npos) << select.out;
  EXPECT_EQ(read_file(db), before);
}

TEST_F(GaRunIntegration, ExitCodesStatusAndReport) {
  write("bad.yaml", "name: x\nseeed: 3\n");
  const Finished bad = run_ga_run({"validate", path("bad.yaml")}, dir_.string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.yaml:2:"), std::string::npos) << bad.err;
  EXPECT_EQ(run_ga_run({"--no-such-flag"}, dir_.string()).exit_code, 2);
  EXPECT_EQ(run_ga_run({"status", path("missing.db")}, dir_.string()).exit_code, 1);
  // Files the experiment reads are checked before anything runs, with where they come from.
  write("no-data.yaml", "name: x\nbackend: {kind: synthetic-test-double, layers: 4, heads: 2}\n"
                        "dataset: {kind: mdqa, file: nq-missing.jsonl.gz, documents: 5}\n"
                        "objective: {kind: pi}\nsearch: {strategy: random}\n");
  for (const std::string command : {"validate", ""}) {
    const std::vector<std::string> args = command.empty() ? std::vector<std::string>{path("no-data.yaml")}
                                                          : std::vector<std::string>{command, path("no-data.yaml")};
    const Finished missing = run_ga_run(args, dir_.string());
    EXPECT_EQ(missing.exit_code, 2) << command;
    EXPECT_NE(missing.err.find("dataset.file"), std::string::npos) << missing.err;
    EXPECT_NE(missing.err.find("nq-missing.jsonl.gz not found"), std::string::npos) << missing.err;
    EXPECT_NE(missing.err.find("lost-in-the-middle"), std::string::npos) << missing.err;
  }
  EXPECT_FALSE(std::filesystem::exists(path("results.db"))) << "nothing is created for a run that cannot start";
  // MDQA's documents and distractors reach the dataset reader (a gold-only
  // file needs other questions' documents as distractors).
  write("mdqa.yaml", "name: m\nbackend: {kind: synthetic-test-double, layers: 4, heads: 2}\n"
                     "dataset: {kind: mdqa, file: " + midtune::testing::source_dir() +
                     "/tests/datasets/fixtures/nq-open-oracle-fixture.jsonl.gz, documents: 3, "
                     "distractors: other-questions, gold_positions: [0, 0.5, 1], search_samples: 2, "
                     "heldout_samples: 1}\nobjective: {kind: pi}\nsearch: {strategy: random}\n");
  const Finished mdqa = run_ga_run({"validate", path("mdqa.yaml")}, dir_.string());
  EXPECT_EQ(mdqa.exit_code, 0) << mdqa.err;
  EXPECT_NE(mdqa.out.find("6 search prompts"), std::string::npos) << mdqa.out;

  write("exp.yaml", experiment_yaml(2, 0));
  EXPECT_EQ(run_ga_run({"validate", path("exp.yaml")}, dir_.string()).exit_code, 0);
  const Finished ran = run_ga_run({path("exp.yaml")}, dir_.string());
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_NE(ran.err.find("generation 3/3"), std::string::npos) << "plain log lines when stderr is not a terminal\n"
                                                               << ran.err;
  const Finished status = run_ga_run({"status", path("results.db")}, dir_.string());
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("resume-check"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("saved by cache"), std::string::npos) << status.out;
  for (const std::string format : {"md", "json", "csv"}) {
    const Finished report = run_ga_run({"report", path("results.db"), "--format", format}, dir_.string());
    EXPECT_EQ(report.exit_code, 0) << format << report.err;
    EXPECT_NE(report.out.find(format == "csv" ? "layer_scale" : format == "json" ? "layer_scales" : "RoPE scales"),
              std::string::npos)
        << report.out;
  }
  const Finished json_report = run_ga_run({"report", path("results.db"), "--format", "json"}, dir_.string());
  const auto report = nlohmann::json::parse(json_report.out);
  EXPECT_EQ(report["best"]["layer_scales"].size(), 12u) << "one decoded scale per layer";
  EXPECT_EQ(report["best"]["position_scores"].size(), 3u);
  EXPECT_EQ(run_ga_run({"report", path("results.db"), "--format", "xml"}, dir_.string()).exit_code, 2);
  EXPECT_EQ(run_ga_run({"report", path("results.db"), "--experiment", "nope"}, dir_.string()).exit_code, 1);
}

}  // namespace
}  // namespace midtune
