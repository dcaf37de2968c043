// ga-run under mpirun as a user starts it (a subprocess, --oversubscribe on
// this small machine): one search on N ranks stores the same rows and prints
// the same report as a single ga-run, for every N; evaluators that run
// another model, or cannot build theirs, are refused before anything is
// evaluated, naming rank and host; nothing hangs.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "schema/process_identity.hpp"
#include "tests/cli/results_db.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/tiny_arch_gguf.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using testing::Finished;

#ifdef MIDTUNE_MPIEXEC
#define MIDTUNE_MPIEXEC_OR_EMPTY MIDTUNE_MPIEXEC
#else
#define MIDTUNE_MPIEXEC_OR_EMPTY ""
#endif

const auto& kRows = testing::stored_rows();

// The report without what depends on the clock (times, rates).
nlohmann::json without_timing(nlohmann::json j) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto& [key, value] : j.items()) {
      const bool timing = key.find("second") != std::string::npos || key.find("time") != std::string::npos ||
                          key.find("wall") != std::string::npos || key.ends_with("_at") ||
                          key.find("per_s") != std::string::npos || key == "db" || key == "database" ||
                          key == "runs";  // each run's provenance: host, threads, evaluators
      if (!timing) out[key] = without_timing(value);
    }
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (auto& value : j) out.push_back(without_timing(value));
    return out;
  }
  return j;
}

class MpiRanks : public testing::TempDirTest {
 protected:
  void SetUp() override {
#ifndef MIDTUNE_MPIEXEC
    GTEST_SKIP() << "this build has no MPI (CMake found no MPI library, or -DMIDTUNE_MPI=OFF): "
                    "the MPI evaluator ranks are not built";
#else
    TempDirTest::SetUp();
    ASSERT_TRUE(fs::exists(testing::ga_run_path())) << testing::ga_run_path();
    // Open MPI refuses to start as root unless told; CI runs as root. Set
    // here, for this test's children only.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    unsetenv(parallel_test_hook());
#endif
  }
  void TearDown() override {
    for (const std::string& dir : session_dirs_) fs::remove_all(dir);
    TempDirTest::TearDown();
  }
  // Per-mpirun TMPDIRs of side-by-side runs, removed after the test.
  std::vector<std::string> session_dirs_;
  static const char* parallel_test_hook() { return "MIDTUNE_TEST_MODEL_OVERRIDE_RANK"; }

  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }

  // Runs `args` to its end, or kills it after `limit_s` and fails: a job
  // that hangs is a failure, never a stuck test.
  Finished run_bounded(std::vector<std::string> argv, double limit_s) const {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    bool timed_out = false;
    const pid_t pid = testing::spawn_process(std::move(argv), out, err);
    Finished f = testing::wait_bounded(pid, out, err, limit_s, &timed_out);
    if (timed_out) ADD_FAILURE() << "still running after " << limit_s << " s; killed";
    return f;
  }

  // Waits for the launcher to end, at most `limit`; then kills it. True when
  // it ended by itself (its wait status in `status`).
  static bool ended_within(pid_t launcher, int& status, std::chrono::seconds limit) {
    const auto since = std::chrono::steady_clock::now();
    bool ended = false;
    while (!ended && std::chrono::steady_clock::now() - since < limit) {
      ended = waitpid(launcher, &status, WNOHANG) == launcher;
      if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!ended) {
      kill(launcher, SIGKILL);
      waitpid(launcher, &status, 0);
    }
    return ended;
  }

  // Whether `pid` has exited, by the lease check's own rule (no such
  // process, or a zombie or one being torn down). A rank whose launcher
  // ended first stays a zombie until init reaps it, here a second or two
  // later.
  static bool exited(pid_t pid) {
    ProcessIdentity rank = this_process();
    rank.pid = pid;
    rank.start_ticks.reset();
    return holder_gone(rank, 0.0);
  }

  // The command line of ga-run ARGS, under mpirun -n `ranks` when ranks > 0.
  static std::vector<std::string> ga_run_argv(int ranks, const std::vector<std::string>& args) {
    std::vector<std::string> argv;
#ifdef MIDTUNE_MPIEXEC
    if (ranks > 0) argv = {MIDTUNE_MPIEXEC, "--oversubscribe", "-n", std::to_string(ranks)};
#endif
    argv.push_back(testing::ga_run_path());
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // ga-run ARGS, under mpirun -n `ranks` when ranks > 0.
  Finished ga_run(int ranks, const std::vector<std::string>& args, double limit_s) const {
    return run_bounded(ga_run_argv(ranks, args), limit_s);
  }

  // Runs `plain_yaml` (exp.yaml, or the same experiment without the test
  // double's latencies) plainly and exp.yaml on each rank count; every
  // database must hold the plain run's rows and give its report. The runs
  // start together, each on its own database and output files: one process
  // on one thread, or one evaluator, would leave a core idle.
  void same_results_for_rank_counts(const std::vector<int>& rank_counts, const std::string& unit_prompts,
                                    double limit_s, const std::string& plain_yaml = "exp.yaml") {
    std::vector<std::pair<std::string, std::vector<std::string>>> jobs = {
        {"plain", ga_run_argv(0, {path(plain_yaml), "--db", path("plain.db"), "--quiet"})}};
    for (const int n : rank_counts) {
      const std::string name = "ranks" + std::to_string(n);
      // Each mpirun its own TMPDIR: Open MPI 4 creates its session
      // directory tree under it, and two launchers starting at once race on
      // the shared top folder ("orte_session_dir failed ... File exists").
      // Short (/tmp/mtm-XXXXXX): PMIx puts Unix sockets there, whose paths
      // must stay under 108 bytes.
      char tmp_template[] = "/tmp/mtm-XXXXXX";
      ASSERT_NE(::mkdtemp(tmp_template), nullptr) << "mkdtemp: " << std::strerror(errno);
      session_dirs_.push_back(tmp_template);
      std::vector<std::string> argv = {"/usr/bin/env", std::string("TMPDIR=") + tmp_template};
      for (std::string& a : ga_run_argv(n, {path("exp.yaml"), "--db", path(name + ".db"), "--unit-prompts", unit_prompts}))
        argv.push_back(std::move(a));
      jobs.push_back({name, std::move(argv)});
    }
    std::vector<pid_t> pids;
    for (const auto& [name, argv] : jobs)
      pids.push_back(testing::spawn_process(argv, path(name + ".out"), path(name + ".err")));
    std::map<std::string, Finished> finished;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const std::string& name = jobs[i].first;
      bool timed_out = false;
      finished[name] = testing::wait_bounded(pids[i], path(name + ".out"), path(name + ".err"), limit_s, &timed_out);
      if (timed_out) ADD_FAILURE() << name << " still running after " << limit_s << " s; killed";
    }
    const Finished& plain = finished["plain"];
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const Finished plain_report = ga_run(0, {"report", path("plain.db"), "--format", "json"}, 60);
    ASSERT_EQ(plain_report.exit_code, 0) << plain_report.err;
    const nlohmann::json expected = without_timing(nlohmann::json::parse(plain_report.out));
    for (const auto& [what, sql] : kRows) ASSERT_FALSE(testing::query_rows(path("plain.db"), sql).empty()) << what;
    for (const int n : rank_counts) {
      SCOPED_TRACE("mpirun -n " + std::to_string(n));
      const std::string db = path("ranks" + std::to_string(n) + ".db");
      const Finished& run = finished["ranks" + std::to_string(n)];
      ASSERT_EQ(run.exit_code, 0) << run.err;
      EXPECT_NE(run.err.find(std::to_string(n - 1) + " evaluator ranks, units of " + unit_prompts + " prompts"),
                std::string::npos)
          << run.err;
      EXPECT_EQ(run.out.substr(0, run.out.find("report:")), plain.out.substr(0, plain.out.find("report:")));
      for (const auto& [what, sql] : kRows)
        EXPECT_EQ(testing::query_rows(db, sql), testing::query_rows(path("plain.db"), sql)) << what;
      const Finished report = ga_run(0, {"report", db, "--format", "json"}, 60);
      ASSERT_EQ(report.exit_code, 0) << report.err;
      EXPECT_EQ(without_timing(nlohmann::json::parse(report.out)), expected);
      expect_workers_recorded(db, n - 1);
    }
  }

  // The driver recorded every evaluator rank for `ga-run status`: each
  // prompt the ranks answered is one the run counted (stored) or one of a
  // speculative run it threw away, and status shows a line per rank with
  // the share of time the evaluators waited.
  void expect_workers_recorded(const std::string& db, int evaluators) const {
    const auto prompts = testing::query_rows(db, "SELECT prompts FROM runs");
    ASSERT_EQ(prompts.size(), 1u);
    // Per run: the prompts it counted plus those speculation discarded, the
    // prompts its ranks answered, how many ranks, and whether every idle
    // fraction lies in [0, 1].
    const auto expected = testing::query_rows(
        db, "SELECT prompts + json_extract(workers, '$.speculative.discarded_prompts') FROM runs");
    ASSERT_EQ(expected.size(), 1u);
    EXPECT_EQ(testing::query_rows(db, "SELECT sum(json_extract(w.value, '$.prompts')), count(*), "
                                      "min(json_extract(w.value, '$.idle_fraction') BETWEEN 0 AND 1) "
                                      "FROM runs r, json_each(r.workers, '$.ranks') w GROUP BY r.id"),
              std::vector<std::string>{expected[0] + " | " + std::to_string(evaluators) + " | 1"});
    const Finished status = ga_run(0, {"status", db}, 60);
    ASSERT_EQ(status.exit_code, 0) << status.err;
    EXPECT_NE(status.out.find(std::to_string(evaluators) + " evaluator ranks, units of"), std::string::npos)
        << status.out;
    EXPECT_NE(status.out.find("evaluators waited"), std::string::npos) << status.out;
    for (int rank = 1; rank <= evaluators; ++rank)
      EXPECT_NE(status.out.find("| " + std::to_string(rank) + " "), std::string::npos) << status.out;
  }
};

// The test double with racing: slices of a race are cut into units as well;
// 24 search prompts in units of 4 keep 4 evaluators busy.
TEST_F(MpiRanks, SyntheticSearchWithRacingStoresTheSameRowsForAnyRankCount) {
  write("exp.yaml", testing::synthetic_lpes_experiment("mpi-check", 3, 0.0) +
                        "  racing: {first: 2, step: 2, confidence: 0.8}\n");
  // Normal: a few seconds per run; the bound only catches a hang.
  same_results_for_rank_counts({2, 3, 5}, "4", 300);
  EXPECT_GT(std::stoi(testing::query_rows(path("ranks5.db"),
                                          "SELECT count(*) FROM individuals WHERE raced_samples IS NOT NULL")[0]),
            0)
      << "the experiment races some children";
}

// Racing with a cost per prompt (a sleep), so that a step's last units keep
// one evaluator computing while the others are free: those take the next
// step's units speculatively, and keep computing them while the driver
// looks. The rows are the plain run's (-n 1 runs as one, where nothing is
// speculative) for 1 and 4 evaluators, both used speculative prompts, and
// status says what speculation cost.
TEST_F(MpiRanks, RacingSpeculatesTheNextStepWithoutChangingTheRows) {
  std::string yaml = testing::synthetic_lpes_experiment("mpi-speculate", 3, 0.0) +
                     "  racing: {first: 2, step: 2, confidence: 0.8}\n";
  // The plain run without the sleeps: the test double's latencies change no
  // result and are no part of the experiment's fingerprint.
  write("plain.yaml", yaml);
  const std::string latency = "latency_ms: 0.000000}";
  ASSERT_NE(yaml.find(latency), std::string::npos);
  yaml.replace(yaml.find(latency), latency.size(), "prompt_latency_ms: 5}");
  write("exp.yaml", yaml);
  // A step is 2 items at each of 3 positions: units of 6 make each
  // candidate's step one unit, so every speculative unit sent is a whole
  // speculative run. Normal: about 2 s per run (the sleeps); the bound only
  // catches a hang.
  same_results_for_rank_counts({2, 5}, "6", 300, "plain.yaml");
  // 1 evaluator is free during every look; with 4, each step with a next
  // one also ends with 3 evaluators free while the last candidate's unit
  // (30 ms of sleep) is computed. Most candidates survive a look: some
  // speculative runs are used.
  for (const char* db : {"ranks2.db", "ranks5.db"}) {
    const auto used = testing::query_rows(
        path(db), "SELECT json_extract(workers, '$.speculative.units') > 0, "
                  "json_extract(workers, '$.speculative.used_prompts') > 0 FROM runs");
    EXPECT_EQ(used, std::vector<std::string>{"1 | 1"}) << db;
  }
  const Finished status = ga_run(0, {"status", path("ranks5.db")}, 60);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("speculation: "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find(" prompts used, "), std::string::npos) << status.out;
}

// Commands that write the database and do not use ranks are refused under a
// launcher rather than run once per rank.
TEST_F(MpiRanks, EvalUnderALauncherIsRefused) {
  write("exp.yaml", testing::synthetic_lpes_experiment("mpi-eval", 1, 0.0));
  const Finished run = ga_run(2, {"eval", path("exp.yaml"), "--db", path("results.db")}, 120);
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("eval runs as one process"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(path("results.db")));
}

fs::path test_model() {
  const char* env = std::getenv("MIDTUNE_MODEL");
  return env && *env ? fs::path(env) : fs::path();
}

// The CPU engine on the real model, one thread per rank: units of 2 prompts
// (so each unit shares a different prompt prefix than the whole batch does)
// give the rows of a single process bit for bit.
TEST_F(MpiRanks, EngineSearchStoresTheSameRowsForAnyRankCount) {
  if (test_model().empty() || !fs::exists(test_model())) GTEST_SKIP() << "MIDTUNE_MODEL not set or missing";
  // One-letter keys and short values instead of generated UUIDs: prompts
  // of about 100 tokens rather than 350 (the forward passes are the test's
  // whole cost), the answer still several tokens, and still 3 pairs so that
  // the 3 gold positions are 3 different prompts.
  write("kv.jsonl",
        "{\"ordered_kv_records\": [[\"a\", \"91c2\"], [\"b\", \"b8a4\"], [\"c\", \"2f97\"]], \"key\": \"b\", "
        "\"value\": \"b8a4\"}\n"
        "{\"ordered_kv_records\": [[\"d\", \"7b15\"], [\"e\", \"d40c\"], [\"f\", \"1e83\"]], \"key\": \"f\", "
        "\"value\": \"1e83\"}\n");
  // One item per split: a search evaluation and each held-out role are 3
  // prompts, cut into units of 2 + 1 (the second unit alone, without the
  // shared prefix). Two candidates evaluated at once, then a generation
  // bred from them.
  write("exp.yaml", "name: mpi-engine\nseed: 5\nbackend: {kind: engine, model: " + test_model().string() +
                        ", device: cpu, threads: 1}\n"
                        "dataset: {kind: kv, file: " + path("kv.jsonl") +
                        ", pairs: 3, gold_positions: [0.0, 0.5, 1.0], search_samples: 1, heldout_samples: 1, "
                        "prime_answer: true}\n"
                        "objective:\n  kind: lpes\n  lpes: {curve: bezier, degree: 2}\n"
                        "search:\n  strategy: ga\n  ga: {population: 2, parents: 1, generations: 1, mutants: 1, "
                        "crossovers: 0}\n");
  // Normal: half a minute for the three runs on two loaded cores; the bound
  // catches a hang.
  same_results_for_rank_counts({2, 3}, "2", 540);
}

fs::path vocab_dir() {
  if (const char* env = std::getenv("MIDTUNE_VOCAB_DIR"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return home ? fs::path(home) / ".cache/midtune/llama.cpp-vocab-0.3.36" : fs::path();
}

// Writes the tiny random-weight GGUF `name` (tests/engine/tiny_arch_gguf.hpp);
// false when the vocabulary files are missing.
bool write_tiny_model(const std::string& name, const std::string& file) {
  for (const auto& spec : testing::tiny_arch_specs()) {
    if (spec.name != name) continue;
    if (!fs::exists(vocab_dir() / spec.vocab_file)) return false;
    testing::TinyGgufWriter::write(file, testing::tiny_arch_gguf(spec, GgufFile(vocab_dir() / spec.vocab_file)));
    return true;
  }
  return false;
}

std::string tiny_engine_experiment(const std::string& model) {
  return "name: mpi-refuse\nseed: 1\nbackend: {kind: engine, model: " + model +
         ", device: cpu, threads: 1}\n"
         "dataset: {kind: kv, pairs: 3, gold_positions: [0.0, 0.5, 1.0], search_samples: 1, heldout_samples: 2}\n"
         "objective:\n  kind: lpes\n  lpes: {curve: bezier, degree: 1}\n"
         "search:\n  strategy: ga\n  ga: {population: 4, parents: 2, generations: 1, mutants: 1, crossovers: 1}\n";
}

// Rank 2 is given another model through the test hook: the driver refuses
// before the results file is even opened, naming rank 2 and its host.
TEST_F(MpiRanks, EvaluatorOnAnotherModelIsRefusedBeforeAnyEvaluation) {
  if (!write_tiny_model("llama3", path("model.gguf")) || !write_tiny_model("qwen2", path("other.gguf")))
    GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  write("exp.yaml", tiny_engine_experiment(path("model.gguf")));
  setenv(parallel_test_hook(), ("2:" + path("other.gguf")).c_str(), 1);
  // Normal: a second or two (tiny models); the bound catches a hang.
  const Finished run = ga_run(3, {path("exp.yaml"), "--db", path("results.db")}, 120);
  unsetenv(parallel_test_hook());
  EXPECT_NE(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("refusing to start; nothing was evaluated"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("rank 2 on host "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("but rank 1 on host "), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(path("results.db"))) << "the results file was opened";

  // The same job with every rank on the same model runs.
  const Finished same = ga_run(3, {path("exp.yaml"), "--db", path("results.db"), "--quiet"}, 120);
  EXPECT_EQ(same.exit_code, 0) << same.err;
}

// An evaluator that cannot build its backend (its model file is missing on
// its node) ends the job with a non-zero status naming it, never a hang.
TEST_F(MpiRanks, EvaluatorThatCannotBuildItsBackendEndsTheJob) {
  if (!write_tiny_model("llama3", path("model.gguf")))
    GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  write("exp.yaml", tiny_engine_experiment(path("model.gguf")));
  setenv(parallel_test_hook(), ("1:" + path("missing.gguf")).c_str(), 1);
  const Finished run = ga_run(3, {path("exp.yaml"), "--db", path("results.db")}, 120);
  unsetenv(parallel_test_hook());
  EXPECT_NE(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("rank 1 on host "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("could not build its backend"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("missing.gguf"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(path("results.db")));
}

// A backend error on an evaluator mid-search (every prompt longer than the
// tiny model's 4096-token context) fails the search as in one process: exit
// 1 naming the rank and host, the failure stored, every rank ended.
TEST_F(MpiRanks, BackendErrorOnAnEvaluatorEndsTheJobNamingTheRank) {
  if (!write_tiny_model("llama3", path("model.gguf")))
    GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  std::string yaml = tiny_engine_experiment(path("model.gguf"));
  yaml.replace(yaml.find("pairs: 3"), 8, "pairs: 150");
  write("exp.yaml", yaml);
  // Normal: a few seconds; the bound catches a hang.
  const Finished run = ga_run(3, {path("exp.yaml"), "--db", path("results.db"), "--quiet"}, 120);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("exceed the model context"), std::string::npos) << run.err;
  EXPECT_TRUE(run.err.find("rank 1 on host ") != std::string::npos ||
              run.err.find("rank 2 on host ") != std::string::npos)
      << run.err;
  EXPECT_EQ(testing::query_rows(path("results.db"), "SELECT status FROM evaluations"),
            std::vector<std::string>{"failed"});
  EXPECT_TRUE(testing::query_rows(path("results.db"), "SELECT * FROM individuals").empty());
}

// The ranks mpirun started for job `launcher` (its children) by MPI rank.
std::map<int, pid_t> ranks_of(pid_t launcher) {
  std::map<int, pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::istringstream stat(testing::read_file(entry.path() / "stat"));
    std::string pid, comm, state;
    pid_t parent = 0;
    stat >> pid >> comm >> state >> parent;
    if (parent != launcher) continue;
    const std::string environ = testing::read_file(entry.path() / "environ");
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    for (std::size_t at = 0; at < environ.size(); at = environ.find('\0', at) + 1) {
      if (environ.compare(at, key.size(), key) == 0) out[std::stoi(environ.substr(at + key.size()))] = std::stoi(name);
      if (environ.find('\0', at) == std::string::npos) break;
    }
  }
  return out;
}

// kill -9 of a random rank, driver or evaluator, at a random moment: the
// launcher ends the whole job (here within a couple of seconds; bound 30 s),
// the results file stays intact, and running the same command again with
// another rank count ends with the rows of an uninterrupted run.
TEST_F(MpiRanks, KilledRankEndsTheJobAndAnyRankCountResumesToTheSameRows) {
  // 60 ms a backend call: with the evaluators on several candidates at once
  // the search still lasts well past the latest kill moment on 3 evaluators.
  const std::string racing = "  racing: {first: 2, step: 2, confidence: 0.8}\n";
  write("exp.yaml", testing::synthetic_lpes_experiment("mpi-kill", 10, 60.0) + racing);
  // The uninterrupted run without the sleeps: the latency changes no result
  // and is no part of the experiment's fingerprint.
  write("plain.yaml", testing::synthetic_lpes_experiment("mpi-kill", 10, 0.0) + racing);
  const Finished plain = ga_run(0, {path("plain.yaml"), "--db", path("plain.db"), "--quiet"}, 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;

  std::random_device device;
  const unsigned seed = device();
  std::mt19937 rng(seed);
  SCOPED_TRACE("kill seed " + std::to_string(seed));
  const int plain_individuals = testing::stored_individuals(path("plain.db"));
  // Every third kill at a wall-clock moment from MPI start-up (about 1.5 s
  // here) into the search; the others a random part of an evaluation after
  // the run stored a few more individuals, so they land mid-search however
  // loaded the machine is.
  auto uniform = [&](double low, double high) { return std::uniform_real_distribution<double>(low, high)(rng); };
  int kills = 0, driver_kills = 0, mid_search_kills = 0, last_stored = 0;
  for (int attempt = 0; attempt < 30 && kills < 10; ++attempt) {
    const int n = 2 + attempt % 3;
    const std::vector<std::string> argv = {MIDTUNE_MPIEXEC_OR_EMPTY, "--oversubscribe", "-n", std::to_string(n),
                                           testing::ga_run_path(), path("exp.yaml"), "--db", path("killed.db"),
                                           "--quiet", "--unit-prompts", "4"};
    const int target = attempt % 3 == 0 || last_stored + 1 >= plain_individuals
                           ? 0
                           : std::uniform_int_distribution<int>(last_stored + 1,
                                                                std::min(plain_individuals - 1, last_stored + 12))(rng);
    const pid_t launcher = testing::spawn_process(argv, path("out.txt"), path("err.txt"));
    if (target == 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(uniform(0.5, 4.0)));
    } else {
      // Normal: a few seconds; the bound catches a run that stalls.
      const auto t0 = std::chrono::steady_clock::now();
      int ignored = 0;
      while (testing::stored_individuals(path("killed.db")) < target && waitpid(launcher, &ignored, WNOHANG) == 0 &&
             std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(uniform(0, 60)));
    }
    const std::map<int, pid_t> ranks = ranks_of(launcher);
    int status = 0;
    if (static_cast<int>(ranks.size()) < n) {  // finished (or not yet started): let it end
      waitpid(launcher, &status, 0);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) break;  // the search completed
      continue;
    }
    const int victim = std::uniform_int_distribution<int>(0, n - 1)(rng);
    kill(ranks.at(victim), SIGKILL);
    ++kills;
    driver_kills += victim == 0;
    const bool ended = ended_within(launcher, status, std::chrono::seconds(30));
    ASSERT_TRUE(ended) << "the job outlived a killed rank " << victim << " by 30 s";
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << victim << " killed, exit 0";
    // Every rank is gone before the next start (the lease of a dead driver is taken over).
    for (const auto& [rank, pid] : ranks)
      for (int i = 0; i < 500 && !exited(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!fs::exists(path("killed.db"))) continue;  // killed during start-up
    EXPECT_EQ(testing::query_rows(path("killed.db"), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
    const int stored = testing::stored_individuals(path("killed.db"));
    std::printf("kill %d (rank %d of %d, aimed after %d individuals): %d stored\n", kills, victim, n, target, stored);
    mid_search_kills += stored > last_stored && stored < plain_individuals;
    last_stored = stored;
  }
  EXPECT_GE(mid_search_kills, 3) << "too few kills landed mid-search (" << kills << " kills)";
  const Finished resumed =
      ga_run(3, {path("exp.yaml"), "--db", path("killed.db"), "--quiet", "--unit-prompts", "4"}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (const auto& [what, sql] : kRows)
    EXPECT_EQ(testing::query_rows(path("killed.db"), sql), testing::query_rows(path("plain.db"), sql)) << what;
  RecordProperty("kills", kills);
  RecordProperty("driver_kills", driver_kills);
  RecordProperty("mid_search_kills", mid_search_kills);
}

// kill -9 of a random rank while the held-out step runs (every generation
// checkpointed, the held-out roles not all stored): the job ends non-zero,
// the file stays intact, and a rerun on another rank count evaluates only
// what was missing and ends with the uninterrupted run's rows and report.
TEST_F(MpiRanks, KilledInTheHeldOutStepResumesToTheSameRowsAndReport) {
  // A search of two generations: each try sits through it before the
  // held-out step it aims at.
  write("exp.yaml", testing::synthetic_lpes_experiment("mpi-kill-heldout", 1, 60.0));
  // The uninterrupted run without the sleeps (they change no result).
  write("plain.yaml", testing::synthetic_lpes_experiment("mpi-kill-heldout", 1, 0.0));
  const Finished plain = ga_run(0, {path("plain.yaml"), "--db", path("plain.db"), "--quiet"}, 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::string generations = testing::query_rows(path("plain.db"), "SELECT count(*) FROM generations")[0];
  const std::string roles = testing::query_rows(path("plain.db"), "SELECT count(*) FROM heldout_results")[0];
  // How many rows a query finds in a file another process is writing; -1
  // while it has no such table yet.
  auto count = [this](const std::string& sql) {
    try {
      return std::stoi(testing::query_rows(path("killed.db"), sql)[0]);
    } catch (const std::exception&) {
      return -1;
    }
  };
  std::random_device device;
  const unsigned seed = device();
  std::mt19937 rng(seed);
  SCOPED_TRACE("victim seed " + std::to_string(seed));
  bool landed = false;
  // The held-out step lasts about half a second here: a few tries at most.
  for (int attempt = 0; attempt < 5 && !landed; ++attempt) {
    fs::remove(path("killed.db"));
    const pid_t launcher = testing::spawn_process(
        {MIDTUNE_MPIEXEC_OR_EMPTY, "--oversubscribe", "-n", "3", testing::ga_run_path(), path("exp.yaml"), "--db",
         path("killed.db"), "--quiet", "--unit-prompts", "4"},
        path("out.txt"), path("err.txt"));
    // Until the last checkpoint is stored (normal: some seconds; 120 s bound).
    const auto started = std::chrono::steady_clock::now();
    while (std::to_string(count("SELECT count(*) FROM generations")) != generations &&
           std::chrono::steady_clock::now() - started < std::chrono::seconds(120))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::map<int, pid_t> ranks = ranks_of(launcher);
    int status = 0;
    if (ranks.size() < 3) {  // already ended
      waitpid(launcher, &status, 0);
      continue;
    }
    const int victim = std::uniform_int_distribution<int>(0, 2)(rng);
    kill(ranks.at(victim), SIGKILL);
    const bool ended = ended_within(launcher, status, std::chrono::seconds(30));
    ASSERT_TRUE(ended) << "the job outlived a killed rank " << victim << " by 30 s";
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << victim << " killed, exit 0";
    for (const auto& [rank, pid] : ranks)
      for (int i = 0; i < 500 && !exited(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(testing::query_rows(path("killed.db"), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
    landed = std::to_string(count("SELECT count(*) FROM heldout_results")) != roles;
  }
  ASSERT_TRUE(landed) << "no kill landed inside the held-out step in 5 tries";
  const Finished resumed =
      ga_run(2, {path("exp.yaml"), "--db", path("killed.db"), "--quiet", "--unit-prompts", "4"}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (const auto& [what, sql] : kRows)
    EXPECT_EQ(testing::query_rows(path("killed.db"), sql), testing::query_rows(path("plain.db"), sql)) << what;
  const Finished report = ga_run(0, {"report", path("killed.db"), "--format", "json"}, 60);
  const Finished plain_report = ga_run(0, {"report", path("plain.db"), "--format", "json"}, 60);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(without_timing(nlohmann::json::parse(report.out)), without_timing(nlohmann::json::parse(plain_report.out)));
}

// An evaluator that hangs (stopped with SIGSTOP: alive, silent) ends the
// job once a unit is --unit-timeout overdue, naming the rank; nothing waits
// forever.
TEST_F(MpiRanks, HungEvaluatorEndsTheJobAfterTheUnitTimeout) {
  write("exp.yaml", testing::synthetic_lpes_experiment("mpi-hang", 30, 20.0));
  const std::vector<std::string> argv = {MIDTUNE_MPIEXEC_OR_EMPTY, "--oversubscribe", "-n", "3",
                                         testing::ga_run_path(), path("exp.yaml"), "--db", path("results.db"),
                                         "--quiet", "--unit-timeout", "2"};
  const pid_t launcher = testing::spawn_process(argv, path("out.txt"), path("err.txt"));
  std::map<int, pid_t> ranks;
  // Until every rank has started (MPI start-up takes about 1.5 s here).
  for (int i = 0; i < 1000 && ranks.size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ranks = ranks_of(launcher);
  }
  ASSERT_EQ(ranks.size(), 3u);
  // Into the search: its first checkpoint stored, 29 generations to go
  // (normal: a second; the bound catches a hang).
  const bool reached = testing::wait_for_generations(path("results.db"), 1, 120);
  kill(ranks.at(1), SIGSTOP);
  int status = 0;
  // Normal: the 2 s deadline plus the abort, about 3 s; 60 s catches a hang.
  const bool ended = ended_within(launcher, status, std::chrono::seconds(60));
  for (const auto& [rank, pid] : ranks) kill(pid, SIGKILL);  // none is left when the job ended
  ASSERT_TRUE(reached) << "no checkpoint within 120 s";
  ASSERT_TRUE(ended) << "the job outlived a hung evaluator by 60 s";
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string err = testing::read_file(path("err.txt"));
  EXPECT_NE(err.find("rank 1 on host "), std::string::npos) << err;
  EXPECT_NE(err.find("(--unit-timeout); ending the job"), std::string::npos) << err;
  EXPECT_EQ(testing::query_rows(path("results.db"), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
}

// SIGTERM as Slurm delivers it (scancel, preemption, --signal: to every
// rank of the step) stops the job cleanly: evaluators ignore it and finish
// their units, the driver stores what finished, releases the lease and the
// job exits 75. SIGUSR1 to mpirun (which forwards it; Open MPI's mpirun
// turns a SIGTERM of its own into a kill of every rank) does the same. The
// same command with another rank count resumes to the rows of an
// uninterrupted run.
TEST_F(MpiRanks, SigtermStopsTheJobResumablyAndAnotherRankCountResumes) {
  std::string yaml = testing::synthetic_lpes_experiment("mpi-stop", 4, 0.0);
  // The uninterrupted run without the sleeps (they change no result).
  write("plain.yaml", yaml);
  // Units of 4 prompts of 20 ms: 80 ms a unit, 6 units an evaluation.
  yaml.replace(yaml.find("latency_ms: "), 0, "prompt_latency_ms: 20, ");
  write("exp.yaml", yaml);
  const Finished plain = ga_run(0, {path("plain.yaml"), "--db", path("plain.db"), "--quiet"}, 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const int all_generations = testing::stored_generations(path("plain.db"));
  ASSERT_EQ(all_generations, 5);

  struct Stop {
    int ranks;
    int after;  // checkpoints stored before the signal
    bool to_every_rank;  // SIGTERM to each rank, else SIGUSR1 to mpirun
  };
  for (const Stop stop : {Stop{3, 1, true}, Stop{2, 3, false}}) {
    SCOPED_TRACE("mpirun -n " + std::to_string(stop.ranks));
    const std::vector<std::string> argv = {MIDTUNE_MPIEXEC_OR_EMPTY, "--oversubscribe", "-n",
                                           std::to_string(stop.ranks), testing::ga_run_path(), path("exp.yaml"),
                                           "--db", path("stopped.db"), "--unit-prompts", "4"};
    const pid_t launcher = testing::spawn_process(argv, path("out.txt"), path("err.txt"));
    // Normal: MPI start-up (1.5 s) and a generation or three; the bound catches a hang.
    const bool reached = testing::wait_for_generations(path("stopped.db"), stop.after, 120);
    const std::map<int, pid_t> ranks = ranks_of(launcher);
    if (stop.to_every_rank) {
      for (const auto& [rank, pid] : ranks) kill(pid, SIGTERM);
    } else {
      kill(launcher, SIGUSR1);
    }
    bool timed_out = false;
    // Normal: the units in flight (80 ms each) and MPI's end; the bound
    // catches a job that does not stop.
    const Finished stopped = testing::wait_bounded(launcher, path("out.txt"), path("err.txt"), 120, &timed_out);
    for (const auto& [rank, pid] : ranks) kill(pid, SIGKILL);  // none is left when the job ended
    ASSERT_TRUE(reached) << "no checkpoint " << stop.after << " within 120 s\n" << stopped.err;
    ASSERT_EQ(static_cast<int>(ranks.size()), stop.ranks) << stopped.err;
    ASSERT_FALSE(timed_out) << "still running 120 s after the signal\n" << stopped.err;
    EXPECT_EQ(stopped.exit_code, 75) << stopped.err;
    EXPECT_NE(stopped.err.find(stop.to_every_rank ? "SIGTERM: stopped" : "SIGUSR1: stopped"), std::string::npos)
        << stopped.err;
    EXPECT_EQ(stopped.err.find("ending every rank"), std::string::npos) << "a clean stop, no abort\n" << stopped.err;
    EXPECT_EQ(testing::query_rows(path("stopped.db"), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
    EXPECT_TRUE(testing::query_rows(path("stopped.db"), "SELECT pid FROM experiment_leases").empty());
    EXPECT_LT(testing::stored_generations(path("stopped.db")), all_generations) << "stopped mid-search";
  }
  // A rank count neither stopped job had; 3 evaluators sleep through the
  // rest of the search sooner than 1.
  const Finished resumed =
      ga_run(4, {path("exp.yaml"), "--db", path("stopped.db"), "--quiet", "--unit-prompts", "4"}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (const auto& [what, sql] : kRows)
    EXPECT_EQ(testing::query_rows(path("stopped.db"), sql), testing::query_rows(path("plain.db"), sql)) << what;
}

// Asked to stop while an evaluator hangs on its unit (SIGSTOPped): the
// driver waits for it no longer than --unit-timeout, then ends every rank
// with the stop's status 75, not a failure; the results file is intact and
// the lease released.
TEST_F(MpiRanks, StopWithAUnitThatDoesNotComeBackEndsTheJobAsStopped) {
  std::string yaml = testing::synthetic_lpes_experiment("mpi-stop-hang", 30, 0.0);
  yaml.replace(yaml.find("latency_ms: "), 0, "prompt_latency_ms: 20, ");
  write("exp.yaml", yaml);
  // 10 s: far above a unit's 80 ms, and 7 s above the 3 s between the
  // SIGSTOP and the SIGTERM below even on a loaded machine, so the deadline
  // that ends the job is the stop's. The test sits through most of it.
  const std::vector<std::string> argv = {MIDTUNE_MPIEXEC_OR_EMPTY, "--oversubscribe", "-n", "3",
                                         testing::ga_run_path(), path("exp.yaml"), "--db", path("results.db"),
                                         "--quiet", "--unit-prompts", "4", "--unit-timeout", "10"};
  const pid_t launcher = testing::spawn_process(argv, path("out.txt"), path("err.txt"));
  const bool reached = testing::wait_for_generations(path("results.db"), 1, 120);
  const std::map<int, pid_t> ranks = ranks_of(launcher);
  if (ranks.size() == 3u) {
    kill(ranks.at(1), SIGSTOP);
    // Rank 1 is the first idle rank the driver picks: at the driver's next
    // dispatch (a unit takes 80 ms) it holds a unit it never answers (or the
    // driver is stuck sending it one); 3 s covers a loaded machine.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    kill(ranks.at(0), SIGTERM);
  }
  bool timed_out = false;
  // Normal: the 10 s deadline and MPI's abort; the bound catches a hang.
  const Finished stopped = testing::wait_bounded(launcher, path("out.txt"), path("err.txt"), 120, &timed_out);
  for (const auto& [rank, pid] : ranks) kill(pid, SIGKILL);  // none is left when the job ended
  ASSERT_TRUE(reached) << stopped.err;
  ASSERT_EQ(ranks.size(), 3u) << stopped.err;
  ASSERT_FALSE(timed_out) << "still running 120 s after the signal\n" << stopped.err;
  EXPECT_EQ(stopped.exit_code, 75) << stopped.err;
  EXPECT_NE(stopped.err.find("SIGTERM: stopped with 1 units in flight that did not come back within 10 s"),
            std::string::npos)
      << stopped.err;
  EXPECT_EQ(testing::query_rows(path("results.db"), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
  EXPECT_TRUE(testing::query_rows(path("results.db"), "SELECT pid FROM experiment_leases").empty());
}

}  // namespace
}  // namespace midtune
