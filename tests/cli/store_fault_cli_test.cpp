// ga-run (a subprocess, synthetic test double) on a results database under
// faults: 8 runs into one new file at once, the same experiment twice, a run
// killed and resumed through its stale lease, a damaged file, somebody
// else's file, and results in a read-only directory. The Store side of the
// same faults: tests/schema/store_fault_test.cpp.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "schema/sqlite.hpp"
#include "schema/store.hpp"
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

// A run queued behind another process's write lock on the results file
// (a long commit, a checkpoint, a sqlite3 shell holding a transaction)
// answers SIGTERM within a second, not after SQLite's minute-long wait, and
// says how to resume.
TEST_F(StoreFaultCli, ARunWaitingForTheFilesLockStopsAtSigterm) {
  const std::string db = path("results.db");
  finished_run("first", db, 1);
  sql::Database holder(db, sql::Database::Mode::read_write);
  holder.exec("BEGIN IMMEDIATE");  // the write lock, held until the end of this test
  write("second.yaml", experiment_yaml("second", 1, 0));
  const pid_t waiting =
      testing::spawn_ga_run({path("second.yaml"), "--db", db, "--quiet"}, path("w.out"), path("w.err"));
  std::this_thread::sleep_for(std::chrono::seconds(2));  // long past its start: it is waiting for the lock
  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(waiting, SIGTERM), 0);
  const Finished stopped = testing::wait_for(waiting, path("w.out"), path("w.err"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  holder.exec("ROLLBACK");
  EXPECT_EQ(stopped.exit_code, 75) << stopped.err;
  EXPECT_NE(stopped.err.find("SIGTERM: stopped while waiting for another process's write to " + db),
            std::string::npos)
      << stopped.err;
  // Milliseconds normally; the minute-long wait it replaces would be 60 s.
  EXPECT_LT(seconds, 10.0);
  const Finished resumed = run_ga_run({path("second.yaml"), "--db", db, "--quiet"}, dir_.string());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
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
    EXPECT_FALSE(fs::exists(db + "-wal") || fs::exists(db + "-shm")) << args[0] << ": no log left beside it";
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

// An experiment's name names its plot file: a stored name that is a path
// (from an older results file, or someone else's) never places the plot
// outside the results folder; a name read from YAML or --new-experiment that
// cannot be one file name is refused, naming the field.
TEST_F(StoreFaultCli, AnExperimentNameNeverWritesOutsideTheResultsFolder) {
  const fs::path folder = dir_ / "results";
  const fs::path victim = dir_ / "victim";
  fs::create_directories(folder);
  fs::create_directories(victim);
  std::ofstream(victim / "notes.txt") << "the user's notes\n";
  const std::string db = (folder / "results.db").string();
  finished_run("plain", db);
  {
    sql::Database d(db, sql::Database::Mode::read_write);
    d.exec("UPDATE experiments SET name = '../victim/notes.txt' WHERE name = 'plain'");
  }
  fs::remove(folder / "plain-heldout.svg");
  const Finished report = run_ga_run({"report", db}, dir_.string());
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(file_bytes((victim / "notes.txt").string()), "the user's notes\n");
  const fs::path safe = folder / ".._victim_notes.txt-heldout.svg";
  EXPECT_NE(report.err.find("plot: " + safe.string()), std::string::npos) << report.err;
  EXPECT_NE(file_bytes(safe.string()).find("<svg"), std::string::npos);
  std::size_t written = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir_)) written += entry.path().extension() == ".svg";
  EXPECT_EQ(written, 1u) << "one plot, in the results folder";
  // Markdown shows HTML as HTML: a name is escaped there as in the HTML report.
  {
    sql::Database d(db, sql::Database::Mode::read_write);
    d.exec("UPDATE experiments SET name = '<img src=x onerror=alert(1)>' WHERE name = '../victim/notes.txt'");
  }
  const Finished markdown = run_ga_run({"report", db, "--svg", path("md.svg")}, dir_.string());
  EXPECT_EQ(markdown.exit_code, 0) << markdown.err;
  EXPECT_NE(markdown.out.find("# Experiment &lt;img src=x onerror=alert(1)&gt;"), std::string::npos) << markdown.out;
  EXPECT_EQ(markdown.out.find("<img"), std::string::npos) << markdown.out;
  fs::remove(path("md.svg"));

  const std::string yaml = experiment_yaml("placeholder", 1, 0);
  const std::vector<std::pair<std::string, std::string>> bad_names = {
      {"\"../victim/notes.txt\\0\"", "a path separator '/' at byte 2"},
      {"\"notes\\0\"", "a NUL byte at byte 5"},
      {"\"tab\\tname\"", "the control byte 9 at byte 3"},
      {"\"" + std::string(201, 'x') + "\"", "is 201 bytes long; at most 200"}};
  for (const auto& [quoted, reason] : bad_names) {
    std::string text = yaml;
    text.replace(text.find("placeholder"), std::string("placeholder").size(), quoted);
    write("bad.yaml", text);
    const Finished validate = run_ga_run({"validate", path("bad.yaml")}, dir_.string());
    EXPECT_EQ(validate.exit_code, 2) << quoted << '\n' << validate.err;
    EXPECT_NE(validate.err.find("name"), std::string::npos) << validate.err;
    EXPECT_NE(validate.err.find(reason), std::string::npos) << quoted << '\n' << validate.err;
  }
  write("good.yaml", experiment_yaml("good", 1, 0));
  const Finished renamed =
      run_ga_run({path("good.yaml"), "--db", path("other.db"), "--new-experiment", "../up"}, dir_.string());
  EXPECT_EQ(renamed.exit_code, 2) << renamed.err;
  EXPECT_NE(renamed.err.find("the experiment name holds a path separator '/' at byte 2"), std::string::npos)
      << renamed.err;
  EXPECT_FALSE(fs::exists(path("other.db")));
  EXPECT_EQ(file_bytes((victim / "notes.txt").string()), "the user's notes\n");
}

// A run on a results file its user may not write (another user's file, a
// read-only mount) says so in words, not in SQLite's; the file is unchanged.
TEST_F(StoreFaultCli, ARunOnAFileItMayNotWriteSaysWhy) {
  const fs::path folder = dir_ / "theirs";
  fs::create_directories(folder);
  const std::string db = (folder / "results.db").string();
  finished_run("theirs", db, 1);
  ASSERT_EQ(chmod(db.c_str(), 0644), 0);
  ASSERT_EQ(chmod(folder.c_str(), 0755), 0);
  write("mine.yaml", experiment_yaml("mine", 1, 0));
  ASSERT_EQ(chmod(path("mine.yaml").c_str(), 0644), 0);
  const Finished probe = run_as_reader({"--no-such-option"}, dir_.string());
  if (probe.exit_code == testing::kCannotDropPrivileges || probe.exit_code == 127)
    GTEST_SKIP() << "cannot run as another user here";
  const std::string before = file_bytes(db);
  const Finished run = run_as_reader({path("mine.yaml"), "--db", db, "--quiet"}, dir_.string());
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find(db), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("a read-only file system"), std::string::npos) << run.err;
  EXPECT_EQ(file_bytes(db), before);
}

// Another user reading a finished results file in a folder both may write
// (status, report, query) leaves no log or index of its own beside it:
// files it owned there would stop the owner's next run.
TEST_F(StoreFaultCli, AnotherUsersReadsLeaveNothingBesideTheFile) {
  const fs::path shared = dir_ / "shared";
  fs::create_directories(shared);
  const std::string db = (shared / "results.db").string();
  finished_run("shared", db, 1);
  ASSERT_FALSE(fs::exists(db + "-wal") || fs::exists(db + "-shm"));
  ASSERT_EQ(chmod(shared.c_str(), 0777), 0);
  ASSERT_EQ(chmod(db.c_str(), 0644), 0);
  const Finished probe = run_as_reader({"--no-such-option"}, dir_.string());
  if (probe.exit_code == testing::kCannotDropPrivileges || probe.exit_code == 127)
    GTEST_SKIP() << "cannot run as another user here";
  const std::string before = file_bytes(db);
  for (const auto& args : std::vector<std::vector<std::string>>{{"status", db},
                                                                {"report", db, "--svg", (shared / "p.svg").string()},
                                                                {"query", db, "SELECT count(*) FROM individuals"}}) {
    const Finished f = run_as_reader(args, dir_.string());
    EXPECT_EQ(f.exit_code, 0) << args[0] << '\n' << f.err;
    EXPECT_FALSE(fs::exists(db + "-wal")) << args[0];
    EXPECT_FALSE(fs::exists(db + "-shm")) << args[0];
  }
  EXPECT_EQ(file_bytes(db), before);
  finished_run("owner-again", db, 1);  // the owner's next run into the same file
}

// On a full disk, status, report and query still read a finished results
// file and leave no log or index beside it (SQLite could not write the
// index there; a few bytes of one were left before). Needs a small tmpfs
// of its own: as root where mounting is allowed, else skipped.
TEST_F(StoreFaultCli, ReadsOnAFullDiskLeaveNothingBeside) {
  const fs::path mount = dir_ / "full";
  fs::create_directories(mount);
  if (::mount("tmpfs", mount.c_str(), "tmpfs", 0, "size=16m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << ")";
  struct Unmount {
    fs::path at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mount};
  const std::string db = (mount / "results.db").string();
  finished_run("full", db, 1);
  {
    std::ofstream fill(mount / "fill", std::ios::binary);
    const std::string block(4096, 'x');
    while (fill.write(block.data(), static_cast<std::streamsize>(block.size()))) {
    }
  }
  ASSERT_FALSE(fs::exists(db + "-wal") || fs::exists(db + "-shm"));
  for (const auto& args : std::vector<std::vector<std::string>>{{"status", db},
                                                                {"report", db, "--svg", path("full.svg")},
                                                                {"query", db, "SELECT count(*) FROM individuals"}}) {
    const Finished f = run_ga_run(args, dir_.string());
    EXPECT_EQ(f.exit_code, 0) << args[0] << '\n' << f.err;
    EXPECT_FALSE(fs::exists(db + "-wal")) << args[0];
    EXPECT_FALSE(fs::exists(db + "-shm")) << args[0];
  }
}

// ---- ga-run query: bounded in time, rows and memory ----

constexpr const char* kEndless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) ";

struct Bounded {
  Finished finished;
  double seconds = 0.0;
  long max_rss_kb = 0;  // the child's own peak resident memory (wait4)
};

// Runs ga-run to its end, at most `limit_s` seconds (then it is killed,
// which the caller sees as signal SIGKILL), with its peak memory.
Bounded run_bounded(const std::vector<std::string>& args, const std::string& out_file, const std::string& err_file,
                    double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = testing::spawn_ga_run(args, out_file, err_file);
  Bounded b;
  int status = 0;
  rusage usage{};
  for (;;) {
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done == pid) break;
    if (b.seconds > limit_s) {
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status)) b.finished.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) b.finished.signal = WTERMSIG(status);
  b.finished.out = testing::read_file(out_file);
  b.finished.err = testing::read_file(err_file);
  b.max_rss_kb = usage.ru_maxrss;
  return b;
}

// An endless statement is stopped by --timeout with a message naming the
// flag, and rows stream out instead of piling up in memory.
TEST_F(StoreFaultCli, QueryStopsAnEndlessStatementAtItsTimeoutInBoundedMemory) {
  const std::string db = path("results.db");
  { Store store(db); }
  const Bounded baseline = run_bounded({"query", db, "SELECT 1"}, "/dev/null", path("base.err"), 60);
  ASSERT_EQ(baseline.finished.exit_code, 0) << baseline.finished.err;
  // Every row printed (to /dev/null) until the timeout: hundreds of
  // thousands of rows of 1000 characters each.
  const Bounded endless = run_bounded({"query", db, std::string(kEndless) + "SELECT x, hex(zeroblob(500)) FROM c",
                                       "--timeout", "2", "--max-rows", "0"},
                                      "/dev/null", path("endless.err"), 60);
  EXPECT_EQ(endless.finished.signal, 0) << "not stopped by its timeout within 60 s";
  EXPECT_EQ(endless.finished.exit_code, 1) << endless.finished.err;
  EXPECT_NE(endless.finished.err.find("ga-run query: stopped by --timeout 2: " + db), std::string::npos)
      << endless.finished.err;
  EXPECT_NE(endless.finished.err.find("--timeout SECONDS"), std::string::npos) << endless.finished.err;
  // 2 s of run time normally; 30 s leaves room for a loaded machine while
  // still failing a statement that ignores the timeout.
  EXPECT_LT(endless.seconds, 30.0);
  // Rows held in memory would take over 1 KB each, some 300000 rows a
  // second on a loaded 2-core machine: hundreds of MB within the 2 s;
  // streamed, the peak stays within a few MB of the process's peak for one row.
  EXPECT_LT(endless.max_rss_kb - baseline.max_rss_kb, 64 * 1024)
      << "peak " << endless.max_rss_kb << " kB against " << baseline.max_rss_kb << " kB for SELECT 1";

  // A statement that never yields a row is stopped all the same.
  const Finished count = run_bounded({"query", db, std::string(kEndless) + "SELECT count(*) FROM c", "--timeout",
                                      "2"},
                                     path("count.out"), path("count.err"), 60)
                             .finished;
  EXPECT_EQ(count.exit_code, 1) << count.err;
  EXPECT_NE(count.err.find("stopped by --timeout 2"), std::string::npos) << count.err;
}

// A value or a recursive CTE that grows without end is stopped by the
// query's value and memory ceilings (not only by its timeout), with a
// message that says so; ATTACH, which would open and leave logs beside a
// file the user did not name, is refused.
TEST_F(StoreFaultCli, QueryMemoryIsBoundedAndAttachIsRefused) {
  const std::string db = path("results.db");
  { Store store(db); }
  const Bounded baseline = run_bounded({"query", db, "SELECT 1"}, "/dev/null", path("base.err"), 60);
  ASSERT_EQ(baseline.finished.exit_code, 0) << baseline.finished.err;
  const std::string huge = "length(hex(zeroblob(499999999)))";
  const std::vector<std::string> statements = {
      "SELECT " + huge + ", " + huge + ", " + huge,
      "WITH RECURSIVE d(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM d) SELECT length(s) FROM d",
      "WITH RECURSIVE d(n, s) AS (SELECT 1, 'x' UNION ALL SELECT n + 1, s || s FROM d WHERE n < 40) "
      "SELECT max(length(s)) FROM d"};
  for (const std::string& statement : statements) {
    const Bounded b = run_bounded({"query", db, statement, "--timeout", "100"}, path("q.out"), path("q.err"), 120);
    EXPECT_EQ(b.finished.signal, 0) << statement;
    EXPECT_EQ(b.finished.exit_code, 1) << statement << '\n' << b.finished.err;
    EXPECT_NE(b.finished.err.find(db + ": the statement outgrew what a query may hold"), std::string::npos)
        << statement << '\n' << b.finished.err;
    // Unbounded, each takes gigabytes (a 1 GB hex string per column; a
    // string doubling past 1 GB); the ceilings hold it to a few hundred MB.
    EXPECT_LT(b.max_rss_kb - baseline.max_rss_kb, 600 * 1024) << statement;
  }
  const std::string other = path("other.db");
  { Store store(other); }
  for (const std::string& statement :
       std::vector<std::string>{"ATTACH DATABASE '" + other + "' AS o", "SELECT count(*) FROM pragma_table_list"}) {
    const Finished f = run_ga_run({"query", db, statement}, dir_.string());
    const bool attach = statement.rfind("ATTACH", 0) == 0;
    EXPECT_EQ(f.exit_code, attach ? 1 : 0) << statement << '\n' << f.err;
    if (attach) {
      EXPECT_NE(f.err.find("refused: ATTACH and DETACH open other files"), std::string::npos) << f.err;
    }
  }
  EXPECT_FALSE(fs::exists(other + "-wal") || fs::exists(other + "-shm")) << "nothing left beside the other file";
}

// --db naming a FIFO (whose open would block for ever), a device or a
// directory is refused at once by every command, by what it is.
TEST_F(StoreFaultCli, ADatabaseThatIsNotARegularFileIsRefusedAtOnce) {
  const std::string fifo = path("fifo.db");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string folder = path("folder.db");
  fs::create_directories(folder);
  write("exp.yaml", experiment_yaml("special", 1, 0));
  const std::vector<std::pair<std::string, std::string>> files = {
      {fifo, "is a FIFO (named pipe), not a results database file"},
      {"/dev/null", "is a device, not a results database file"},
      {folder, "is a directory, not a results database file"}};
  for (const auto& [file, reason] : files) {
    for (const auto& args : std::vector<std::vector<std::string>>{{path("exp.yaml"), "--db", file, "--quiet"},
                                                                  {"status", file},
                                                                  {"report", file},
                                                                  {"query", file, "SELECT 1"}}) {
      const Bounded b = run_bounded(args, path("s.out"), path("s.err"), 60);
      EXPECT_EQ(b.finished.signal, 0) << args[0] << ' ' << file << ": did not end within 60 s";
      EXPECT_NE(b.finished.exit_code, 0) << args[0] << ' ' << file;
      EXPECT_NE(b.finished.err.find(file + ": " + reason), std::string::npos)
          << args[0] << ' ' << file << '\n' << b.finished.err;
    }
  }
  EXPECT_FALSE(fs::exists("/dev/null-journal"));
  // An empty file is a database with no tables to SQLite; query says so.
  std::ofstream(path("empty.db")).close();
  const Finished empty = run_ga_run({"query", path("empty.db"), "SELECT * FROM individuals"}, dir_.string());
  EXPECT_EQ(empty.exit_code, 1) << empty.err;
  EXPECT_NE(empty.err.find(path("empty.db") + " is an empty file: it holds no tables"), std::string::npos)
      << empty.err;
  EXPECT_EQ(fs::file_size(path("empty.db")), 0u);
  EXPECT_FALSE(fs::exists(fifo + "-journal") || fs::exists(fifo + "-wal"));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// --max-rows (10000 by default) cuts the output and says so; a result
// within it is printed whole, without the note.
TEST_F(StoreFaultCli, QueryCutsAtMaxRowsAndSaysSo) {
  const std::string db = path("results.db");
  { Store store(db); }
  const Finished endless = run_ga_run({"query", db, std::string(kEndless) + "SELECT x FROM c"}, dir_.string());
  EXPECT_EQ(endless.exit_code, 0) << endless.err;
  const std::vector<std::string> lines = lines_of(endless.out);
  ASSERT_EQ(lines.size(), 2u + 10000u + 1u) << "header, rule, 10000 rows, the note";
  EXPECT_EQ(lines[2 + 9999], "| 10000 |");
  EXPECT_EQ(lines.back(), "(cut at 10000 rows; --max-rows to see more)");

  const std::string five = std::string(kEndless) + "SELECT x FROM c LIMIT 5";
  const Finished cut = run_ga_run({"query", db, five, "--max-rows", "3"}, dir_.string());
  EXPECT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_EQ(cut.out, "| x   |\n|-----|\n| 1   |\n| 2   |\n| 3   |\n(cut at 3 rows; --max-rows to see more)\n");
  const Finished whole = run_ga_run({"query", db, five, "--max-rows", "5"}, dir_.string());
  EXPECT_EQ(whole.out, "| x   |\n|-----|\n| 1   |\n| 2   |\n| 3   |\n| 4   |\n| 5   |\n(5 rows)\n");
  EXPECT_EQ(run_ga_run({"query", db, "SELECT 1", "--max-rows", "-1"}, dir_.string()).exit_code, 2);
}

// The table as it always was: columns padded to the widest cell, NULL
// written out; rows past the first batch keep the first batch's widths.
TEST_F(StoreFaultCli, QueryPrintsATable) {
  const std::string db = path("results.db");
  finished_run("table", db);
  const Finished small = run_ga_run(
      {"query", db, "SELECT name, NULL AS missing, 12345 AS n FROM experiments UNION ALL SELECT 'x', NULL, 1"},
      dir_.string());
  EXPECT_EQ(small.exit_code, 0) << small.err;
  EXPECT_EQ(small.out,
            "| name  | missing | n     |\n"
            "|-------|---------|-------|\n"
            "| table | NULL    | 12345 |\n"
            "| x     | NULL    | 1     |\n"
            "(2 rows)\n");
  const Finished many = run_ga_run({"query", db, std::string(kEndless) + "SELECT x FROM c LIMIT 1000"}, dir_.string());
  const std::vector<std::string> lines = lines_of(many.out);
  ASSERT_EQ(lines.size(), 1003u) << many.err;
  for (int x = 1; x <= 1000; ++x) {
    const std::string cell = std::to_string(x);
    EXPECT_EQ(lines[1 + x], "| " + cell + std::string(cell.size() < 3 ? 3 - cell.size() : 0, ' ') + " |");
  }
  EXPECT_EQ(lines.back(), "(1000 rows)");
}

// ---- what the read-only commands leave, and files they cannot use ----

// status, report and query on a finished WAL file, and on somebody else's
// WAL file (refused by status and report), leave no -wal/-shm beside it.
TEST_F(StoreFaultCli, ReadOnlyCommandsLeaveNoLogBesideTheFile) {
  const std::string db = path("results.db");
  finished_run("tidy", db);
  ASSERT_FALSE(fs::exists(db + "-wal") || fs::exists(db + "-shm"));
  const std::string foreign = path("other.db");
  {
    sql::Database d(foreign, sql::Database::Mode::read_write_create);
    d.exec("PRAGMA journal_mode=WAL; CREATE TABLE notes (t TEXT);");
  }
  for (const std::string& file : {db, foreign}) {
    const std::string before = file_bytes(file);
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"status", file}, {"report", file, "--svg", path("plot.svg")}, {"query", file, "SELECT 1"}}) {
      const Finished f = run_ga_run(args, dir_.string());
      // query reads any SQLite file; status and report only midtune's
      EXPECT_EQ(f.exit_code == 0, file == db || args[0] == "query") << args[0] << ' ' << file << '\n' << f.err;
      EXPECT_FALSE(fs::exists(file + "-wal")) << args[0] << ' ' << file;
      EXPECT_FALSE(fs::exists(file + "-shm")) << args[0] << ' ' << file;
      EXPECT_EQ(file_bytes(file), before) << args[0] << ' ' << file;
    }
  }
}

// A results file cut in half: every command names it as damaged, without
// raw SQL, and leaves it as it was.
TEST_F(StoreFaultCli, ATruncatedDatabaseIsCalledDamaged) {
  const std::string db = path("results.db");
  finished_run("truncated", db, 6);
  fs::resize_file(db, fs::file_size(db) / 2);
  const std::string truncated = file_bytes(db);
  const std::vector<std::vector<std::string>> commands = {{"status", db},
                                                          {"report", db},
                                                          {path("truncated.yaml"), "--db", db, "--quiet"},
                                                          {"query", db, "SELECT count(*) FROM individuals"}};
  for (const auto& args : commands) {
    const Finished f = run_ga_run(args, dir_.string());
    EXPECT_EQ(f.exit_code, 1) << args[0] << '\n' << f.err;
    EXPECT_NE(f.err.find(db + ": the database is damaged ("), std::string::npos) << args[0] << '\n' << f.err;
    EXPECT_EQ(f.err.find("in SQL:"), std::string::npos) << args[0] << '\n' << f.err;
    EXPECT_EQ(file_bytes(db), truncated) << args[0];
    EXPECT_FALSE(fs::exists(db + "-wal") || fs::exists(db + "-shm")) << args[0];
  }
}

// A results file that lost a table: a run refuses it before writing,
// naming the file and the table; status and report say the same.
TEST_F(StoreFaultCli, AResultsFileMissingATableIsRefused) {
  const std::string db = path("results.db");
  finished_run("partial", db);
  {
    sql::Database d(db, sql::Database::Mode::read_write);
    d.exec("DROP TABLE generations");
  }
  const std::string before = file_bytes(db);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {path("partial.yaml"), "--db", db, "--quiet"}, {"status", db}, {"report", db}}) {
    const Finished f = run_ga_run(args, dir_.string());
    EXPECT_EQ(f.exit_code, 1) << args[0] << '\n' << f.err;
    EXPECT_NE(f.err.find(db + ": the database is damaged: it lacks table generations of midtune schema version"),
              std::string::npos)
        << args[0] << '\n' << f.err;
    EXPECT_EQ(file_bytes(db), before) << args[0];
  }
}

// ---- a killed run's lease: zombies and containers ----

// kill -9 and the same command at once, before the killed process is
// reaped (a zombie, as for ~0.1 s after a kill in a shell): taken over.
TEST_F(StoreFaultCli, ARunKilledButNotYetReapedIsTakenOver) {
  write("zombie.yaml", experiment_yaml("zombie", 4, 40.0));
  const std::string db = path("results.db");
  const pid_t victim =
      testing::spawn_ga_run({path("zombie.yaml"), "--db", db, "--quiet"}, path("victim.out"), path("victim.err"));
  ASSERT_FALSE(wait_for_row(db, "SELECT 1 FROM experiment_leases").empty()) << testing::read_file(path("victim.err"));
  kill(victim, SIGKILL);
  siginfo_t info{};
  // Wait until it is a zombie, without reaping it (WNOWAIT); bounded by the kill.
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(victim), &info, WEXITED | WNOWAIT), 0);
  const Finished resumed = run_ga_run({path("zombie.yaml"), "--db", db, "--quiet"}, dir_.string());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("took over the lease of pid " + std::to_string(victim)), std::string::npos)
      << resumed.err;
  EXPECT_EQ(testing::wait_for(victim, path("victim.out"), path("victim.err")).signal, SIGKILL);
}

// A run in a container (here `unshare --pid --fork --mount-proc`: ga-run is
// pid 1 of its own PID namespace) killed with its namespace: the same
// command outside takes its lease over at once and resumes.
TEST_F(StoreFaultCli, ARunKilledInAnotherPidNamespaceIsTakenOver) {
  if (!fs::exists("/usr/bin/unshare")) GTEST_SKIP() << "no /usr/bin/unshare (util-linux)";
  const Finished probe = testing::run_process({"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "/bin/true"},
                                              dir_.string());
  if (probe.exit_code != 0) GTEST_SKIP() << "unshare --pid is not permitted here: " << probe.err;
  finished_run("contained", path("reference.db"), 4);
  write("contained.yaml", experiment_yaml("contained", 4, 40.0));
  const std::string db = path("results.db");
  // --kill-child: killing unshare kills ga-run (pid 1 inside) and so the namespace.
  const pid_t unshare = testing::spawn_process({"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                                                testing::ga_run_path(), path("contained.yaml"), "--db", db, "--quiet"},
                                               path("victim.out"), path("victim.err"));
  ASSERT_EQ(wait_for_row(db, "SELECT pid FROM experiment_leases WHERE (SELECT count(*) FROM individuals) >= 5"), "1")
      << testing::read_file(path("victim.err"));
  kill(unshare, SIGKILL);
  testing::wait_for(unshare, path("victim.out"), path("victim.err"));
  const Finished resumed = run_ga_run({path("contained.yaml"), "--db", db, "--quiet"}, dir_.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("took over the lease of pid 1 on host"), std::string::npos) << resumed.err;
  EXPECT_EQ(rows(db, kResult, "contained"), rows(path("reference.db"), kResult, "contained"));
}

}  // namespace
}  // namespace midtune
