// The results database under faults a user meets: many processes creating
// one new file at once, two processes on one experiment (the lease), a
// damaged file, somebody else's SQLite file, and a read-only directory.
// Everything here runs in-process or in fork()ed children; the ga-run
// command line over the same faults is tests/cli/store_fault_cli_test.cpp.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include "schema/store.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/schema/fault_files.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using testing::file_bytes;

class StoreFaultTest : public testing::TempDirTest {
 protected:
  std::string db_path() const { return path("results.db"); }
};

ExperimentRecord experiment_named(const std::string& name) {
  ExperimentRecord e;
  e.name = name;
  e.config_text = "name: " + name + "\n";
  e.config_hash = "h";
  e.search_config = nlohmann::json::object();
  return e;
}

EvaluationRecord evaluation_keyed(const std::string& key) {
  EvaluationRecord r;
  r.cache_key = key;
  r.key_hash = "hash-of-" + key;
  r.intervention = "{}";
  r.dataset_slice = "{}";
  r.metric = "exact_match";
  r.model = "m";
  r.position_scores = {{0.0, 1.0, 1, 1}};
  r.fitness_inputs = nlohmann::json::object();
  return r;
}

// Waits for a fork()ed child; its exit code, or -signal.
int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST_F(StoreFaultTest, NewFileCarriesTheMidtuneApplicationId) {
  { Store store(db_path()); }
  sql::Database reader(db_path(), sql::Database::Mode::read_only);
  EXPECT_EQ(reader.application_id(), kMidtuneApplicationId);
  EXPECT_EQ(reader.user_version(), latest_schema_version());
}

// Creating and migrating is one locked step: 8 processes opening one new
// file at the same moment all succeed and each finds the schema created once.
TEST_F(StoreFaultTest, EightProcessesCreateOneNewFileTogether) {
  constexpr int kProcesses = 8;
  std::vector<pid_t> children;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(ready[1]);
      char go;
      if (read(ready[0], &go, 1) != 0) _exit(3);  // all start when the pipe closes
      try {
        Store store(db_path());
        store.create_experiment(experiment_named("exp-" + std::to_string(p)));
        for (int k = 0; k < 20; ++k) store.insert_evaluation(evaluation_keyed(std::to_string(p) + "-" + std::to_string(k)), {});
        // The same key from every process: stored once, the others find it.
        store.cache_evaluation(evaluation_keyed("shared"), {});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", p, e.what());
        _exit(1);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  close(ready[0]);
  close(ready[1]);
  for (pid_t pid : children) EXPECT_EQ(wait_child(pid), 0);
  Store store(db_path(), Store::Access::read_only);
  EXPECT_EQ(store.experiments().size(), static_cast<size_t>(kProcesses));
  EXPECT_EQ(store.totals().evaluations_ok, kProcesses * 20 + 1);
  EXPECT_EQ(store.schema_version(), latest_schema_version());
}

// ---- the experiment lease ----

TEST_F(StoreFaultTest, ASecondProcessIsRefusedWhileTheLeaseIsAlive) {
  Store owner(db_path());
  EXPECT_FALSE(owner.acquire_lease("exp", {}));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      Store second(db_path());
      second.acquire_lease("exp", {});
      _exit(1);
    } catch (const LeaseHeld& e) {
      const std::string what = e.what();
      const bool names_owner = what.find("pid " + std::to_string(getppid())) != std::string::npos &&
                               what.find("on host ") != std::string::npos &&
                               what.find("since ") != std::string::npos && what.find("--takeover") != std::string::npos;
      if (!names_owner) std::fprintf(stderr, "message: %s\n", e.what());
      _exit(names_owner ? 0 : 2);
    } catch (...) {
      _exit(3);
    }
  }
  EXPECT_EQ(wait_child(pid), 0) << "the second process must get LeaseHeld naming the owner";
  const auto lease = owner.lease("exp");
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->pid, getpid());
  EXPECT_TRUE(lease->alive());
  owner.release_lease();
  EXPECT_FALSE(owner.lease("exp")) << "released";
}

// The lease of a process on another host whose heartbeat is older than the
// age it declared is dead: taken over, and reported as replaced.
TEST_F(StoreFaultTest, AStaleLeaseIsTakenOver) {
  { Store store(db_path()); }
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write);
    db.exec("INSERT INTO experiment_leases (experiment, host, pid, started_at, heartbeat_at, stale_after_seconds) "
            "VALUES ('exp', 'elsewhere', 4242, '2020-01-01T00:00:00.000Z', '2020-01-01T00:00:00.000Z', 60)");
  }
  Store store(db_path());
  const auto replaced = store.acquire_lease("exp", {});
  ASSERT_TRUE(replaced);
  EXPECT_EQ(replaced->host, "elsewhere");
  EXPECT_EQ(replaced->pid, 4242);
  EXPECT_FALSE(replaced->alive());
  EXPECT_EQ(store.lease("exp")->pid, getpid());
}

TEST_F(StoreFaultTest, AFreshLeaseElsewhereIsRefusedUnlessTakenOver) {
  { Store store(db_path()); }
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write);
    db.exec("INSERT INTO experiment_leases (experiment, host, pid, stale_after_seconds) VALUES ('exp', 'elsewhere', 4242, 600)");
  }
  Store store(db_path());
  try {
    store.acquire_lease("exp", {});
    FAIL() << "a live lease on another host must be refused";
  } catch (const LeaseHeld& e) {
    EXPECT_NE(std::string(e.what()).find("pid 4242 on host elsewhere since "), std::string::npos) << e.what();
  }
  LeasePolicy takeover;
  takeover.takeover = true;
  EXPECT_EQ(store.acquire_lease("exp", takeover)->pid, 4242);
  EXPECT_EQ(store.lease("exp")->pid, getpid());
}

// A process killed on this host is recognised by its pid at once, whatever
// its heartbeat says (so a killed run resumes with the same command).
TEST_F(StoreFaultTest, ALeaseOfADeadProcessOnThisHostIsTakenOverAtOnce) {
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) {
    Store store(db_path());
    store.acquire_lease("exp", {});
    _exit(0);  // no release: as after kill -9
  }
  ASSERT_EQ(wait_child(dead), 0);
  Store store(db_path());
  const auto before = store.lease("exp");
  ASSERT_TRUE(before) << "the child's lease stays behind";
  EXPECT_FALSE(before->alive());
  const auto replaced = store.acquire_lease("exp", {});
  ASSERT_TRUE(replaced);
  EXPECT_EQ(replaced->pid, dead);
}

// Once another process took the lease over, the first one's next heartbeat
// (inside its next commit) fails, so it writes nothing more.
TEST_F(StoreFaultTest, AHeartbeatAfterATakeoverStopsTheFormerOwner) {
  Store owner(db_path());
  owner.acquire_lease("exp", {});
  const auto experiment = owner.create_experiment(experiment_named("exp"));
  const std::int64_t run = owner.start_run(experiment.id);
  owner.heartbeat(run);
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write);
    db.exec("UPDATE experiment_leases SET host = 'elsewhere', pid = 4242");
  }
  EXPECT_THROW(owner.heartbeat(run), LeaseLost);
}

// Every commit of the run is a heartbeat, the held-out step's included.
TEST_F(StoreFaultTest, EvaluationAndHeldoutCommitsMoveTheLeasesHeartbeat) {
  Store store(db_path());
  store.acquire_lease("exp", {});
  const auto experiment = store.create_experiment(experiment_named("exp"));
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write);
    db.exec("UPDATE experiment_leases SET heartbeat_at = '2020-01-01T00:00:00.000Z'");
  }
  const StoredEvaluation stored = store.cache_evaluation(evaluation_keyed("heldout-key"), {});
  EXPECT_LT(store.lease("exp")->heartbeat_age_seconds, 60.0) << "an evaluation's commit";
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write);
    db.exec("UPDATE experiment_leases SET heartbeat_at = '2020-01-01T00:00:00.000Z'");
  }
  store.record_heldout(experiment.id, "baseline", "heldout", stored.id);
  EXPECT_LT(store.lease("exp")->heartbeat_age_seconds, 60.0) << "a held-out row's commit";
}

TEST_F(StoreFaultTest, LeaseTimeoutMustBePositive) {
  Store store(db_path());
  LeasePolicy policy;
  policy.stale_after_seconds = 0;
  EXPECT_THROW(store.acquire_lease("exp", policy), std::invalid_argument);
}

// ---- who holds a lease: zombies, reused pids, containers, reboots ----

// A lease row planted with every identity column, heartbeat now.
void plant_lease(const std::string& db_path, const ProcessIdentity& holder, double stale_after_seconds = 600,
                 const std::string& heartbeat_sql = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')") {
  sql::Database db(db_path, sql::Database::Mode::read_write);
  db.exec("DELETE FROM experiment_leases");
  auto s = db.prepare(
      "INSERT INTO experiment_leases (experiment, host, pid, heartbeat_at, stale_after_seconds, pid_start_ticks, "
      "boot_id, pid_namespace) VALUES ('exp', ?, ?, " + heartbeat_sql + ", ?, ?, ?, ?)");
  s.bind_all(holder.host, holder.pid, stale_after_seconds, holder.start_ticks, holder.boot_id, holder.pid_namespace);
  s.run();
}

// The state letter of /proc/PID/stat ('?' when there is none).
char process_state(pid_t pid) {
  const std::string stat = file_bytes("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

// A live process to name in a lease: a child blocked until this is
// destroyed (then reaped, so its pid is gone).
struct BlockedChild {
  BlockedChild() {
    int release[2];
    if (pipe(release) != 0) return;
    pid = fork();
    if (pid == 0) {
      close(release[1]);
      char byte;
      (void)!read(release[0], &byte, 1);
      _exit(0);
    }
    close(release[0]);
    release_fd = release[1];
  }
  ~BlockedChild() { end(); }
  // Ends the child; its exit code.
  int end() {
    if (release_fd < 0) return -1;
    close(release_fd);
    release_fd = -1;
    return wait_child(pid);
  }
  pid_t pid = -1;
  int release_fd = -1;
};

// Field 22 of /proc/PID/stat: the start time in clock ticks since boot.
std::int64_t start_ticks(pid_t pid) {
  const std::string stat = file_bytes("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int number = 3; number <= 22 && fields >> field; ++number) {
  }
  return std::stoll(field);
}

TEST_F(StoreFaultTest, ALeaseNamesItsHoldersStartTimeBootAndPidNamespace) {
  Store store(db_path());
  store.acquire_lease("exp", {});
  const auto lease = store.lease("exp");
  ASSERT_TRUE(lease);
  const ProcessIdentity me = this_process();
  ASSERT_TRUE(me.start_ticks && me.boot_id && me.pid_namespace) << "this test needs /proc";
  EXPECT_EQ(lease->pid_start_ticks, me.start_ticks);
  EXPECT_EQ(lease->boot_id, me.boot_id);
  EXPECT_EQ(lease->pid_namespace, me.pid_namespace);
  EXPECT_EQ(lease->pid_namespace->rfind("pid:[", 0), 0u) << *lease->pid_namespace;
  EXPECT_TRUE(lease->alive());
}

// kill -9 of a process whose parent has not reaped it yet leaves a zombie:
// the pid still exists, but the lease is taken over at once.
TEST_F(StoreFaultTest, ALeaseHeldByAZombieIsTakenOver) {
  { Store store(db_path()); }
  const pid_t zombie = fork();
  ASSERT_GE(zombie, 0);
  if (zombie == 0) {
    try {
      Store store(db_path());
      store.acquire_lease("exp", {});
      _exit(0);  // no release; not reaped until wait_child below
    } catch (const std::exception& e) {
      std::fprintf(stderr, "zombie-to-be: %s\n", e.what());
      _exit(1);
    }
  }
  // Exiting takes a moment; 10 s bounds a wait that normally takes milliseconds.
  for (int i = 0; i < 1000 && process_state(zombie) != 'Z'; ++i) usleep(10000);
  ASSERT_EQ(process_state(zombie), 'Z');
  ASSERT_EQ(kill(zombie, 0), 0) << "a zombie's pid still exists";
  Store store(db_path());
  const auto lease = store.lease("exp");
  ASSERT_TRUE(lease);
  EXPECT_FALSE(lease->alive());
  const auto replaced = store.acquire_lease("exp", {});
  ASSERT_TRUE(replaced);
  EXPECT_EQ(replaced->pid, zombie);
  EXPECT_EQ(store.lease("exp")->pid, getpid());
  EXPECT_EQ(wait_child(zombie), 0);
}

// The pid of a lease now belongs to another process (another start time):
// taken over; with the holder's own start time the same lease is refused.
TEST_F(StoreFaultTest, ALeaseWhosePidNowBelongsToAnotherProcessIsTakenOver) {
  { Store store(db_path()); }
  BlockedChild live;
  ASSERT_GT(live.pid, 0);
  ProcessIdentity holder = this_process();
  ASSERT_TRUE(holder.start_ticks) << "this test needs /proc";
  holder.pid = live.pid;
  holder.start_ticks = start_ticks(live.pid);
  Store store(db_path());
  plant_lease(db_path(), holder);
  EXPECT_THROW(store.acquire_lease("exp", {}), LeaseHeld) << "the live holder, its own start time";
  holder.start_ticks = *holder.start_ticks + 1;  // as if the holder died and the pid went to `live`
  plant_lease(db_path(), holder);
  const auto replaced = store.acquire_lease("exp", {});
  ASSERT_TRUE(replaced);
  EXPECT_EQ(replaced->pid, live.pid);
  EXPECT_EQ(live.end(), 0);
}

// Before schema 9 a lease named only host and pid: still judged by them.
TEST_F(StoreFaultTest, ALeaseWithoutTheHoldersIdentityIsJudgedByItsPid) {
  { Store store(db_path()); }
  BlockedChild live;
  ASSERT_GT(live.pid, 0);
  Store store(db_path());
  plant_lease(db_path(), {this_process().host, live.pid, std::nullopt, std::nullopt, std::nullopt});
  EXPECT_THROW(store.acquire_lease("exp", {}), LeaseHeld);
  ASSERT_EQ(live.end(), 0);  // reaped: the pid is gone
  EXPECT_EQ(store.acquire_lease("exp", {})->pid, live.pid);
}

// Another boot id on this host: rebooted since the lease's last heartbeat,
// so its holder is gone, whatever age the lease declared; a heartbeat
// younger than this boot comes from another machine of the same name.
TEST_F(StoreFaultTest, ALeaseFromBeforeARebootIsTakenOver) {
  { Store store(db_path()); }
  ProcessIdentity holder = this_process();
  holder.boot_id = "00000000-0000-0000-0000-000000000000";
  Store store(db_path());
  plant_lease(db_path(), holder, 1e9);
  EXPECT_THROW(store.acquire_lease("exp", {}), LeaseHeld) << "a fresh heartbeat under another boot id";
  plant_lease(db_path(), holder, 1e9, "'2000-01-01T00:00:00.000Z'");
  const auto replaced = store.acquire_lease("exp", {});
  ASSERT_TRUE(replaced);
  EXPECT_EQ(replaced->boot_id, holder.boot_id);
}

// A holder in a PID namespace of its own (a container; here unshare(2),
// as `unshare --pid --fork` does) is pid 1 there. Its lease is refused
// while it runs (found through /proc by its start time and its pid in its
// namespace) and taken over once it died with its namespace.
// child_in_new_pid_namespace: the exit code of `body` run as pid 1 of a new
// namespace; kCannotUnshare where that is not permitted.
constexpr int kCannotUnshare = 42;
template <typename Body>
pid_t child_in_new_pid_namespace(Body body) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (unshare(CLONE_NEWPID) != 0) _exit(kCannotUnshare);
  const pid_t inner = fork();
  if (inner < 0) _exit(kCannotUnshare);
  if (inner == 0) {
    try {
      _exit(body());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "in the new PID namespace: %s\n", e.what());
      _exit(1);
    }
  }
  _exit(wait_child(inner) == 0 ? 0 : 1);
}

TEST_F(StoreFaultTest, ALeaseHeldInAnotherPidNamespaceIsRefusedWhileItRunsAndTakenOverAfter) {
  { Store store(db_path()); }
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t outer = child_in_new_pid_namespace([&] {
    close(ready[0]);
    close(release[1]);
    if (getpid() != 1) return 3;
    Store store(db_path());
    store.acquire_lease("exp", {});
    (void)!write(ready[1], "1", 1);
    char byte;
    (void)!read(release[0], &byte, 1);
    _exit(0);  // holding the lease (no release, as after kill -9); its namespace ends with it
  });
  ASSERT_GT(outer, 0);
  close(ready[1]);
  close(release[0]);
  // Ends the holder on every path (a byte, not EOF: the namespace's outer
  // process holds the pipe's other end too); its exit code.
  std::optional<int> ended;
  auto end_holder = [&] {
    if (!ended) {
      (void)!write(release[1], "1", 1);
      close(release[1]);
      ended = wait_child(outer);
    }
    return *ended;
  };
  struct AtExit {
    std::function<int()> f;
    ~AtExit() { f(); }
  } at_exit{end_holder};
  char byte;
  const bool acquired = read(ready[0], &byte, 1) == 1;  // EOF when the child could not unshare
  close(ready[0]);
  if (!acquired) {
    if (end_holder() == kCannotUnshare)
      GTEST_SKIP() << "unshare(CLONE_NEWPID) is not permitted here (needs CAP_SYS_ADMIN)";
    FAIL() << "the holder in its own PID namespace failed: " << end_holder();
  }
  Store store(db_path());
  const auto held = store.lease("exp");
  ASSERT_TRUE(held);
  EXPECT_EQ(held->pid, 1) << "pid 1 of its namespace";
  EXPECT_NE(held->pid_namespace, this_process().pid_namespace);
  EXPECT_TRUE(held->alive());
  EXPECT_THROW(store.acquire_lease("exp", {}), LeaseHeld) << "while it runs";
  ASSERT_EQ(end_holder(), 0);
  const auto replaced = store.acquire_lease("exp", {});
  ASSERT_TRUE(replaced) << "its namespace is gone with it";
  EXPECT_EQ(replaced->pid, 1);
  EXPECT_EQ(store.lease("exp")->pid, getpid());
}

// ---- damaged files ----

// A results file of a few MB with 4 KB of random bytes over one page in its
// middle: every way of opening it refuses, naming the file, and the bytes
// stay as they were.
TEST_F(StoreFaultTest, ADamagedFileIsRefusedBeforeAnythingIsWritten) {
  {
    Store store(db_path());
    for (int k = 0; k < 3000; ++k)
      store.insert_evaluation(evaluation_keyed("key-" + std::to_string(k)),
                              {{"s", 0.5, true, std::string(300, 'x'), -0.5, 100}});
  }
  testing::overwrite_middle_page(db_path(), 4096, 20240517);
  const std::string damaged = file_bytes(db_path());
  for (const auto access : {Store::Access::read_write, Store::Access::read_write_existing, Store::Access::read_only}) {
    for (const auto check : {Store::Check::quick, Store::Check::full}) {
      try {
        Store store(db_path(), access, check);
        ADD_FAILURE() << "a damaged file was opened";
      } catch (const DamagedDatabase& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(db_path() + ": the database is damaged"), std::string::npos) << what;
        EXPECT_NE(what.find(".recover"), std::string::npos) << what;
      }
      EXPECT_EQ(file_bytes(db_path()), damaged);
      EXPECT_FALSE(fs::exists(db_path() + "-wal") || fs::exists(db_path() + "-shm")) << "no log left beside it";
    }
  }
}

// A file cut short (a copy that stopped, a full disk): every way of opening
// it, and a query, says it is damaged, naming it; its bytes stay.
TEST_F(StoreFaultTest, ATruncatedFileIsRefusedAsDamaged) {
  {
    Store store(db_path());
    for (int k = 0; k < 2000; ++k)
      store.insert_evaluation(evaluation_keyed("key-" + std::to_string(k)),
                              {{"s", 0.5, true, std::string(300, 'x'), -0.5, 100}});
  }
  fs::resize_file(db_path(), fs::file_size(db_path()) / 2);
  const std::string truncated = file_bytes(db_path());
  auto expect_damaged = [&](const std::function<void()>& open, const std::string& what) {
    try {
      open();
      ADD_FAILURE() << what << ": a truncated file was read";
    } catch (const DamagedDatabase& e) {
      EXPECT_NE(std::string(e.what()).find(db_path() + ": the database is damaged ("), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("in SQL:"), std::string::npos) << "no raw SQL: " << e.what();
    }
    EXPECT_EQ(file_bytes(db_path()), truncated) << what;
    EXPECT_FALSE(fs::exists(db_path() + "-wal") || fs::exists(db_path() + "-shm")) << what;
  };
  for (const auto access : {Store::Access::read_write, Store::Access::read_write_existing, Store::Access::read_only})
    expect_damaged([&] { Store store(db_path(), access); }, "Store");
  expect_damaged([&] { run_read_only_query(db_path(), "SELECT count(*) FROM sample_results"); }, "query");
}

// A midtune file that lost a table (or a column) of its schema version,
// changed outside midtune: refused before anything is written, naming the
// file and what is missing, rather than written into and failing later.
TEST_F(StoreFaultTest, AFileMissingATableIsRefusedBeforeAnythingIsWritten) {
  {
    Store store(db_path());
    store.create_experiment(experiment_named("exp"));
  }
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write);
    db.exec("DROP TABLE generations; DROP TABLE heldout_results; ALTER TABLE runs DROP COLUMN prompts");
  }
  const std::string before = file_bytes(db_path());
  for (const auto access : {Store::Access::read_write, Store::Access::read_write_existing, Store::Access::read_only}) {
    try {
      Store store(db_path(), access);
      ADD_FAILURE() << "a file missing tables was opened";
    } catch (const DamagedDatabase& e) {
      EXPECT_NE(std::string(e.what()).find(db_path() + ": the database is damaged: it lacks tables generations, "
                                           "heldout_results and column runs.prompts of midtune schema version " +
                                           std::to_string(latest_schema_version())),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(file_bytes(db_path()), before);
  }
}

// A read-only connection to a WAL file creates its log and index beside it
// and cannot remove them; readers remove them once they are the last
// connection and the log is empty, and leave a writer's alone.
TEST_F(StoreFaultTest, ReadersLeaveNoLogBesideTheFile) {
  auto log_left = [&] { return fs::exists(db_path() + "-wal") || fs::exists(db_path() + "-shm"); };
  {
    Store store(db_path());
    store.create_experiment(experiment_named("exp"));
  }
  ASSERT_FALSE(log_left());
  const std::string before = file_bytes(db_path());
  { Store reader(db_path(), Store::Access::read_only); }
  EXPECT_FALSE(log_left()) << "Store, read-only";
  EXPECT_EQ(run_read_only_query(db_path(), "SELECT name FROM experiments").rows.size(), 1u);
  EXPECT_FALSE(log_left()) << "query";
  { sql::Database reader(db_path(), sql::Database::Mode::read_only); }
  EXPECT_FALSE(log_left()) << "a read-only connection";
  EXPECT_EQ(file_bytes(db_path()), before);

  Store writer(db_path());
  writer.create_experiment(experiment_named("second"));
  { Store reader(db_path(), Store::Access::read_only); }
  EXPECT_TRUE(fs::exists(db_path() + "-wal")) << "the writer's log stays while it is open";
  writer.create_experiment(experiment_named("third"));
  EXPECT_EQ(Store(db_path(), Store::Access::read_only).experiments().size(), 3u);
}

// Somebody else's WAL-mode file: refused, and no log left beside it.
TEST_F(StoreFaultTest, AForeignWalFileIsRefusedAndNoLogIsLeft) {
  const std::string file = path("other.db");
  {
    sql::Database db(file, sql::Database::Mode::read_write_create);
    db.exec("PRAGMA journal_mode=WAL; CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('x');");
  }
  ASSERT_FALSE(fs::exists(file + "-wal"));
  const std::string before = file_bytes(file);
  for (const auto access : {Store::Access::read_write, Store::Access::read_only}) {
    EXPECT_THROW(Store(file, access), NotMidtuneDatabase);
    EXPECT_EQ(file_bytes(file), before);
    EXPECT_FALSE(fs::exists(file + "-wal") || fs::exists(file + "-shm"));
  }
}

// ---- somebody else's file ----

// Each is refused and left byte-identical: no WAL switch, no tables, no stamp.
TEST_F(StoreFaultTest, ForeignFilesAreRefusedAndLeftUnchanged) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"users.db", "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'ada');"},
      {"experiments-only.db",
       "CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO experiments VALUES (1, 'x');"},
      {"version-99.db", "CREATE TABLE notes (t TEXT); PRAGMA user_version = 99;"},
      {"other-application.db", "PRAGMA application_id = 1234; CREATE TABLE runs (x);"}};
  for (const auto& [name, sql_text] : files) {
    const std::string file = path(name);
    {
      sql::Database db(file, sql::Database::Mode::read_write_create);
      db.exec(sql_text);
    }
    const std::string before = file_bytes(file);
    for (const auto access : {Store::Access::read_write, Store::Access::read_write_existing, Store::Access::read_only}) {
      try {
        Store store(file, access);
        ADD_FAILURE() << name << " was opened";
      } catch (const NotMidtuneDatabase& e) {
        EXPECT_NE(std::string(e.what()).find(file + ": not a midtune results database"), std::string::npos)
            << e.what();
      }
      EXPECT_EQ(file_bytes(file), before) << name;
      EXPECT_FALSE(fs::exists(file + "-wal")) << name;
    }
    sql::Database reader(file, sql::Database::Mode::read_only);
    auto mode = reader.prepare("PRAGMA journal_mode");
    ASSERT_TRUE(mode.step());
    EXPECT_EQ(mode.column_text(0), "delete") << name << ": the journal mode is untouched";
  }
}

TEST_F(StoreFaultTest, ANonSqliteFileIsRefusedAndLeftUnchanged) {
  std::ofstream(path("notes.txt")) << std::string(8192, 'n');
  const std::string before = file_bytes(path("notes.txt"));
  EXPECT_THROW(Store(path("notes.txt")), NotMidtuneDatabase);
  EXPECT_EQ(file_bytes(path("notes.txt")), before);
}

// A midtune file from before application_id (user_version > 0, midtune's
// tables) is still accepted, stamped at its next write-open, and read as is.
TEST_F(StoreFaultTest, AnOlderMidtuneFileWithoutApplicationIdIsAcceptedAndStamped) {
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write_create);
    for (const Migration& m : schema_migrations())
      if (m.version <= 5) db.exec(m.sql);
    db.exec("PRAGMA user_version = 5");
    ASSERT_EQ(db.application_id(), 0);
  }
  { EXPECT_NO_THROW(Store(db_path(), Store::Access::read_only)); }
  {
    Store store(db_path());
    EXPECT_EQ(store.schema_version(), latest_schema_version());
  }
  sql::Database reader(db_path(), sql::Database::Mode::read_only);
  EXPECT_EQ(reader.application_id(), kMidtuneApplicationId);
}

// midtune's own file from a newer schema: refused unchanged, saying so.
TEST_F(StoreFaultTest, AFileFromANewerMidtuneIsRefusedUnchanged) {
  { Store store(db_path()); }
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write);
    db.exec("PRAGMA user_version = " + std::to_string(latest_schema_version() + 1));
  }
  const std::string before = file_bytes(db_path());
  for (const auto access : {Store::Access::read_write, Store::Access::read_only}) {
    try {
      Store store(db_path(), access);
      ADD_FAILURE() << "a newer file was opened";
    } catch (const sql::SqlError& e) {
      EXPECT_NE(std::string(e.what()).find("is newer than this midtune understands"), std::string::npos) << e.what();
    }
    EXPECT_EQ(file_bytes(db_path()), before);
  }
}

// An empty file (a ga-run killed before its first commit) is blank: a run
// creates the schema in it; a reader refuses it.
TEST_F(StoreFaultTest, AnEmptyFileIsCreatedIntoByARunAndRefusedByAReader) {
  std::ofstream(db_path()).close();
  EXPECT_THROW(Store(db_path(), Store::Access::read_only), NotMidtuneDatabase);
  Store store(db_path());
  EXPECT_EQ(store.schema_version(), latest_schema_version());
}

TEST_F(StoreFaultTest, ReadersNeverCreateAFile) {
  EXPECT_THROW(Store(path("typo.db"), Store::Access::read_only), sql::SqlError);
  EXPECT_THROW(Store(path("typo.db"), Store::Access::read_write_existing), sql::SqlError);
  EXPECT_THROW(run_read_only_query(path("typo.db"), "SELECT 1"), sql::SqlError);
  EXPECT_FALSE(fs::exists(path("typo.db")));
}

// ---- a read-only directory ----

// The exit code of `body` run in a child process to which `folder` is
// read-only: root ignores directory permissions, so a root caller's child
// drops to an unprivileged user (nobody) first. kCannotDropPrivileges when
// it cannot; kStillWritable when the folder stayed writable to it.
constexpr int kCannotDropPrivileges = 4, kStillWritable = 5;
int read_only_folder_child(const fs::path& folder, const std::function<int()>& body) {
  if (chmod(folder.c_str(), 0555) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(kCannotDropPrivileges);
    if (access(folder.c_str(), W_OK) == 0) _exit(kStillWritable);
    try {
      _exit(body());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "read-only directory: %s\n", e.what());
      _exit(1);
    }
  }
  const int code = pid > 0 ? wait_child(pid) : -1;
  chmod(folder.c_str(), 0755);
  return code;
}

// A finished WAL-mode file in a directory this process may not write: the
// read-only connection cannot make the log's index beside it, so it reads
// the file immutable (every commit is in it: no log is left).
TEST_F(StoreFaultTest, AWalFileInAReadOnlyDirectoryIsRead) {
  const fs::path folder = dir_ / "ro";
  fs::create_directories(folder);
  const std::string file = (folder / "results.db").string();
  {
    Store store(file);
    store.create_experiment(experiment_named("exp"));
  }
  ASSERT_FALSE(fs::exists(file + "-wal")) << "a closed store leaves no log";
  const std::string before = file_bytes(file);
  const int code = read_only_folder_child(folder, [&] {
    Store store(file, Store::Access::read_only);
    return store.experiments().size() == 1 &&
                   run_read_only_query(file, "SELECT name FROM experiments").rows.at(0).at(0).value_or("") == "exp"
               ? 0
               : 2;
  });
  if (code == kCannotDropPrivileges)
    GTEST_SKIP() << "running as root and cannot switch to uid 65534, so no directory is read-only here";
  EXPECT_NE(code, kStillWritable) << "the directory stayed writable";
  EXPECT_EQ(code, 0);
  EXPECT_EQ(file_bytes(file), before);
  EXPECT_FALSE(fs::exists(file + "-shm"));
}

// The same file with a log beside it but not the log's index (copied
// without it, or the index deleted): an empty log holds nothing, so the
// file is read as it is; a log holding commits cannot be replayed without
// writing the index, which is said, naming the log.
TEST_F(StoreFaultTest, AWalFileWithoutItsIndexInAReadOnlyDirectory) {
  const fs::path folder = dir_ / "ro";
  fs::create_directories(folder);
  const std::string file = (folder / "results.db").string();
  {
    Store writer(db_path());
    writer.create_experiment(experiment_named("exp"));
    fs::copy_file(db_path(), file);
    fs::copy_file(db_path() + "-wal", file + "-wal");  // while open: the commit is in the log only
  }
  ASSERT_GT(fs::file_size(file + "-wal"), 0u);
  ASSERT_FALSE(fs::exists(file + "-shm"));
  int code = read_only_folder_child(folder, [&] {
    try {
      Store store(file, Store::Access::read_only);
      return 2;
    } catch (const sql::SqlError& e) {
      const std::string what = e.what();
      const bool clear = what.find(file + ": cannot read the database: its write-ahead log " + file + "-wal holds "
                                          "commits") != std::string::npos;
      if (!clear) std::fprintf(stderr, "message: %s\n", e.what());
      return clear ? 0 : 3;
    }
  });
  if (code == kCannotDropPrivileges)
    GTEST_SKIP() << "running as root and cannot switch to uid 65534, so no directory is read-only here";
  EXPECT_EQ(code, 0) << "a log with commits and no index: said so";

  fs::copy_file(db_path(), file, fs::copy_options::overwrite_existing);  // now holds every commit
  std::ofstream(file + "-wal", std::ios::trunc).close();
  code = read_only_folder_child(folder, [&] {
    Store store(file, Store::Access::read_only);
    return store.experiments().size() == 1 ? 0 : 2;
  });
  EXPECT_EQ(code, 0) << "an empty log and no index: read";
  EXPECT_FALSE(fs::exists(file + "-shm"));
}

}  // namespace
}  // namespace midtune
