// ga-run (a subprocess, synthetic test double) on a results database under
// faults: 8 runs into one new file at once, the same experiment twice, a run
// killed and resumed through its stale lease, a damaged file, somebody
// else's file, and results in a read-only directory. The Store side of the
// same faults: tests/schema/store_fault_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "schema/sqlite.hpp"
#include "tests/cli/results_db.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/schema/fault_files.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using testing::file_bytes;
using testing::Finished;
using testing::run_ga_run;

std::string experiment_yaml(const std::string& name, int generations, double latency_ms) {
  return testing::synthetic_lpes_experiment(name, generations, latency_ms);
}

// What a search decided, without which process computed it (cache_hit
// differs when several processes share the cache).
constexpr const char* kResult =
    "SELECT i.candidate_id, i.generation, i.genome, printf('%.17g', i.fitness) FROM individuals i "
    "JOIN experiments e ON e.id = i.experiment_id WHERE e.name = ? ORDER BY i.candidate_id";

class StoreFaultCli : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(fs::exists(testing::ga_run_path())) << testing::ga_run_path();
  }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }

  static std::vector<std::string> rows(const std::string& db, const std::string& sql_text,
                                       const std::string& parameter = "") {
    return testing::query_rows(db, sql_text, parameter);
  }

  // A finished search of `name` in `db`.
  void finished_run(const std::string& name, const std::string& db, int generations = 2) {
    write(name + ".yaml", experiment_yaml(name, generations, 0));
    const Finished f = run_ga_run({path(name + ".yaml"), "--db", db, "--quiet"}, dir_.string());
    ASSERT_EQ(f.exit_code, 0) << f.err;
  }

  // Polls until `sql_text` on `db` returns a row (the file may not exist yet).
  static std::string wait_for_row(const std::string& db, const std::string& sql_text) {
    for (int i = 0; i < 2000; ++i) {
      try {
        if (fs::exists(db)) {
          const auto r = rows(db, sql_text);
          if (!r.empty()) return r[0];
        }
      } catch (const sql::SqlError&) {
        // the schema is not there yet
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return "";
  }
};

// Creating and migrating one new file is one locked step and every
// transaction waits on a busy file: 8 searches started at once into one new
// database all finish, each exactly as it does alone (all 8 run the same
// search under different names, so they also race on every cache key).
TEST_F(StoreFaultCli, EightRunsIntoOneNewDatabaseAllComplete) {
  finished_run("alone", path("reference.db"));
  const std::vector<std::string> reference = rows(path("reference.db"), kResult, "alone");
  ASSERT_FALSE(reference.empty());
  constexpr int kRuns = 8;
  std::vector<pid_t> pids;
  for (int r = 0; r < kRuns; ++r) {
    const std::string name = "exp-" + std::to_string(r);
    write(name + ".yaml", experiment_yaml(name, 2, 0));
    pids.push_back(testing::spawn_ga_run({path(name + ".yaml"), "--db", path("shared.db"), "--quiet"},
                                         path(name + ".out"), path(name + ".err")));
  }
  for (int r = 0; r < kRuns; ++r) {
    const std::string name = "exp-" + std::to_string(r);
    const Finished f = testing::wait_for(pids[r], path(name + ".out"), path(name + ".err"));
    EXPECT_EQ(f.exit_code, 0) << name << ":\n" << f.err;
  }
  for (int r = 0; r < kRuns; ++r) {
    const std::string name = "exp-" + std::to_string(r);
    EXPECT_EQ(rows(path("shared.db"), kResult, name), reference) << name;
    EXPECT_EQ(rows(path("shared.db"),
                   "SELECT count(*) FROM runs r JOIN experiments e ON e.id = r.experiment_id "
                   "WHERE e.name = ? AND r.finished_at IS NOT NULL",
                   name),
              std::vector<std::string>{"1"})
        << name;
    EXPECT_EQ(rows(path("shared.db"),
                   "SELECT count(*) > 0 FROM heldout_results h JOIN experiments e ON e.id = h.experiment_id "
                   "WHERE e.name = ?",
                   name),
              std::vector<std::string>{"1"})
        << name << ": the held-out step ran";
  }
  EXPECT_EQ(rows(path("shared.db"), "SELECT count(*) FROM experiment_leases"), std::vector<std::string>{"0"})
      << "every lease released";
}

// The same experiment twice at once: the second exits at once naming the
// owner; status says "running" with the owner while the first runs, and
// "complete" after.
TEST_F(StoreFaultCli, TheSameExperimentTwiceIsRefusedAtOnce) {
  write("exp.yaml", experiment_yaml("twice", 6, 40.0));
  const std::string db = path("results.db");
  const pid_t first = testing::spawn_ga_run({path("exp.yaml"), "--db", db, "--quiet", "--lease-timeout", "30"},
                                            path("first.out"), path("first.err"));
  const std::string lease = wait_for_row(db, "SELECT pid, stale_after_seconds FROM experiment_leases");
  ASSERT_EQ(lease, std::to_string(first) + " | 30.0") << testing::read_file(path("first.err"));

  const auto start = std::chrono::steady_clock::now();
  const Finished second = run_ga_run({path("exp.yaml"), "--db", db, "--quiet"}, dir_.string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(second.exit_code, 3) << second.err;
  EXPECT_NE(second.err.find("experiment 'twice' in " + db + " is being run by pid " + std::to_string(first) +
                            " on host "),
            std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find(" since "), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("use --takeover after it died"), std::string::npos) << second.err;
  EXPECT_LT(seconds, 5.0) << "refused at once, before any evaluation";

  const Finished running = run_ga_run({"status", db}, dir_.string());
  EXPECT_EQ(running.exit_code, 0) << running.err;
  EXPECT_NE(running.out.find("running (" ), std::string::npos) << running.out;
  EXPECT_NE(running.out.find("pid " + std::to_string(first) + " since "), std::string::npos) << running.out;

  const Finished done = testing::wait_for(first, path("first.out"), path("first.err"));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const Finished after = run_ga_run({"status", db}, dir_.string());
  EXPECT_NE(after.out.find("complete ("), std::string::npos) << after.out;
  EXPECT_EQ(after.out.find("stopped"), std::string::npos) << after.out;
  EXPECT_EQ(after.out.find("running"), std::string::npos) << after.out;
  EXPECT_EQ(rows(db, "SELECT count(*) FROM runs"), std::vector<std::string>{"1"})
      << "the refused process left no run behind";
  EXPECT_EQ(rows(db, "SELECT count(*) FROM experiment_leases"), std::vector<std::string>{"0"});
}

// kill -9 leaves the lease behind; the same command takes it over at once
// (the owner's pid is gone on this host) and ends exactly like a run that
// was never interrupted. A stale lease of another host is taken over; a
// fresh one only with --takeover.
TEST_F(StoreFaultCli, AKilledRunsLeaseIsTakenOverAndTheRunResumesToTheSameResult) {
  finished_run("resume", path("reference.db"), 4);
  write("resume.yaml", experiment_yaml("resume", 4, 40.0));
  const std::string db = path("killed.db");
  const pid_t victim =
      testing::spawn_ga_run({path("resume.yaml"), "--db", db, "--quiet"}, path("victim.out"), path("victim.err"));
  ASSERT_FALSE(wait_for_row(db, "SELECT 1 WHERE (SELECT count(*) FROM individuals) >= 5").empty());
  kill(victim, SIGKILL);
  ASSERT_EQ(testing::wait_for(victim, path("victim.out"), path("victim.err")).signal, SIGKILL);
  ASSERT_EQ(rows(db, "SELECT pid FROM experiment_leases"), std::vector<std::string>{std::to_string(victim)});

  const Finished resumed = run_ga_run({path("resume.yaml"), "--db", db, "--quiet"}, dir_.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("took over the lease of pid " + std::to_string(victim)), std::string::npos)
      << resumed.err;
  EXPECT_EQ(rows(db, kResult, "resume"), rows(path("reference.db"), kResult, "resume"));

  auto plant_lease = [&](const std::string& heartbeat_sql) {
    sql::Database d(db, sql::Database::Mode::read_write);
    d.exec("INSERT INTO experiment_leases (experiment, host, pid, started_at, heartbeat_at, stale_after_seconds) "
           "VALUES ('resume', 'elsewhere', 4242, '2020-01-01T00:00:00.000Z', " + heartbeat_sql + ", 600)");
  };
  plant_lease("'2020-01-01T00:00:00.000Z'");  // stale: 600 s declared, years old
  const Finished stale = run_ga_run({path("resume.yaml"), "--db", db, "--quiet"}, dir_.string());
  EXPECT_EQ(stale.exit_code, 0) << stale.err;
  EXPECT_NE(stale.err.find("took over the lease of pid 4242 on host elsewhere"), std::string::npos) << stale.err;

  plant_lease("strftime('%Y-%m-%dT%H:%M:%fZ', 'now')");  // alive on another host
  const Finished refused = run_ga_run({path("resume.yaml"), "--db", db, "--quiet"}, dir_.string());
  EXPECT_EQ(refused.exit_code, 3) << refused.err;
  EXPECT_NE(refused.err.find("is being run by pid 4242 on host elsewhere since 2020-01-01T00:00:00.000Z"),
            std::string::npos)
      << refused.err;
  const Finished status = run_ga_run({"status", db}, dir_.string());
  EXPECT_NE(status.out.find("running (elsewhere pid 4242"), std::string::npos) << status.out;
  const Finished forced = run_ga_run({path("resume.yaml"), "--db", db, "--quiet", "--takeover"}, dir_.string());
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(rows(db, kResult, "resume"), rows(path("reference.db"), kResult, "resume"));
  EXPECT_EQ(run_ga_run({path("resume.yaml"), "--db", db, "--lease-timeout", "0"}, dir_.string()).exit_code, 2);
}

// 4 KB of random bytes over the middle of a finished results file: status,
// a run and report all exit 1 naming the file, and the file is not written.
TEST_F(StoreFaultCli, ADamagedDatabaseIsRefusedAndNotWritten) {
  const std::string db = path("results.db");
  finished_run("damaged", db, 6);
  ASSERT_EQ(rows(db, "PRAGMA freelist_count"), std::vector<std::string>{"0"}) << "every page in use";
  ASSERT_TRUE(!fs::exists(db + "-wal") || fs::file_size(db + "-wal") == 0) << "every commit is in the file";
  testing::overwrite_middle_page(db, 4096, 7);
  const std::string damaged = file_bytes(db);
  const std::vector<std::vector<std::string>> commands = {{"status", db},
                                                          {"status", db, "--integrity-check"},
                                                          {path("damaged.yaml"), "--db", db, "--quiet"},
                                                          {path("damaged.yaml"), "--db", db, "--integrity-check"},
                                                          {"report", db},
                                                          {"report", db, "--integrity-check"}};
  for (const auto& args : commands) {
    const Finished f = run_ga_run(args, dir_.string());
    EXPECT_EQ(f.exit_code, 1) << args[0] << ' ' << args.back() << '\n' << f.err;
    EXPECT_NE(f.err.find(db + ": the database is damaged (PRAGMA "), std::string::npos) << f.err;
    EXPECT_NE(f.err.find(".recover"), std::string::npos) << f.err;
    EXPECT_EQ(file_bytes(db), damaged) << args[0];
  }
}

// Another program's SQLite file is refused by every command and keeps every
// byte (no WAL switch, no tables); read-only commands never create a file.
TEST_F(StoreFaultCli, SomebodyElsesDatabaseIsRefusedAndUnchanged) {
  const std::string db = path("users.db");
  {
    sql::Database d(db, sql::Database::Mode::read_write_create);
    d.exec("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'ada');");
  }
  const std::string before = file_bytes(db);
  write("exp.yaml", experiment_yaml("foreign", 1, 0));
  const std::vector<std::vector<std::string>> commands = {
      {path("exp.yaml"), "--db", db, "--quiet"}, {"status", db}, {"report", db}, {"eval", path("exp.yaml"), "--db", db}};
  for (const auto& args : commands) {
    const Finished f = run_ga_run(args, dir_.string());
    EXPECT_NE(f.exit_code, 0) << args[0];
    EXPECT_NE(f.err.find(db + ": not a midtune results database"), std::string::npos) << args[0] << '\n' << f.err;
    EXPECT_EQ(file_bytes(db), before) << args[0];
    EXPECT_FALSE(fs::exists(db + "-wal")) << args[0];
  }
  const std::string typo = path("typo.db");
  for (const auto& args : std::vector<std::vector<std::string>>{{"eval", path("exp.yaml"), "--db", typo},
                                                                {"status", typo},
                                                                {"report", typo},
                                                                {"query", typo, "SELECT 1"}}) {
    const Finished f = run_ga_run(args, dir_.string());
    EXPECT_NE(f.exit_code, 0) << args[0];
    EXPECT_NE(f.err.find(typo), std::string::npos) << args[0] << '\n' << f.err;
    EXPECT_FALSE(fs::exists(typo)) << args[0] << " created a file";
  }
}

// ga-run as a user who may not write the results folder.
Finished run_as_reader(const std::vector<std::string>& args, const std::string& dir) {
  return run_ga_run(args, dir, /*unprivileged=*/true);
}

// status, report and query on a WAL results file in a directory the reader
// may not write; report puts its plot where --svg says, and says where.
TEST_F(StoreFaultCli, ResultsInAReadOnlyDirectoryAreRead) {
  const fs::path folder = dir_ / "results";
  fs::create_directories(folder);
  const std::string db = (folder / "results.db").string();
  finished_run("readonly", db);
  ASSERT_EQ(rows(db, "PRAGMA journal_mode"), std::vector<std::string>{"wal"});
  fs::remove(folder / "readonly-heldout.svg");
  const std::string before = file_bytes(db);
  const fs::path plots = dir_ / "plots";
  fs::create_directories(plots);
  ASSERT_EQ(chmod(plots.c_str(), 0777), 0);
  ASSERT_EQ(chmod(folder.c_str(), 0555), 0);
  // As root the reader is an unprivileged user, who must be able to become
  // one and to reach the build; where it cannot, the same read path is
  // still covered in-process by StoreFaultTest.AWalFileInAReadOnlyDirectoryIsRead.
  const Finished probe = run_as_reader({"--no-such-option"}, dir_.string());
  if (probe.exit_code == testing::kCannotDropPrivileges || probe.exit_code == 127) {
    chmod(folder.c_str(), 0755);
    GTEST_SKIP() << "running as root, and uid " << testing::kUnprivilegedId
                 << (probe.exit_code == 127 ? " cannot execute " + testing::ga_run_path()
                                            : std::string(" cannot be switched to"));
  }
  ASSERT_EQ(probe.exit_code, 2) << probe.err;

  const Finished status = run_as_reader({"status", db}, dir_.string());
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("readonly"), std::string::npos) << status.out;
  const Finished query = run_as_reader({"query", db, "SELECT name FROM experiments"}, dir_.string());
  EXPECT_EQ(query.exit_code, 0) << query.err;
  EXPECT_NE(query.out.find("readonly"), std::string::npos) << query.out;
  const std::string svg = (plots / "plot.svg").string();
  const Finished report = run_as_reader({"report", db, "--svg", svg}, dir_.string());
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("# Experiment readonly"), std::string::npos) << report.out;
  EXPECT_NE(report.err.find("plot: " + svg), std::string::npos) << report.err;
  EXPECT_NE(file_bytes(svg).find("<svg"), std::string::npos);
  // Without --svg the plot's default place is the read-only folder: the
  // report still prints, and says the plot was not written and how to place it.
  const Finished beside = run_as_reader({"report", db}, dir_.string());
  EXPECT_EQ(beside.exit_code, 0) << beside.err;
  EXPECT_NE(beside.err.find("plot: not written"), std::string::npos) << beside.err;
  EXPECT_NE(beside.err.find("--svg PATH"), std::string::npos) << beside.err;
  chmod(folder.c_str(), 0755);
  EXPECT_EQ(file_bytes(db), before);
  EXPECT_FALSE(fs::exists(folder / "readonly-heldout.svg"));
}

}  // namespace
}  // namespace midtune
