// A whole ga-run search evaluated on two ga-serve processes equals the same
// search run in-process, also when one server is killed mid-search.
#include <sqlite3.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/server/serve_process.hpp"
#include "tests/test_paths.hpp"

namespace midtune::server {
namespace {

namespace fs = std::filesystem;
using testing::ServeProcess;

constexpr int kSeed = 77;

std::string experiment(const std::string& backend) {
  return "name: server-search\n"
         "seed: " + std::to_string(kSeed) + "\n"
         "backend: " + backend + "\n"
         "dataset: {kind: kv, pairs: 6, gold_positions: [0.0, 0.5, 1.0], search_samples: 8, heldout_samples: 8, "
         "metric: teacher_forced}\n"
         "objective:\n  kind: lpes\n  lpes: {curve: bezier, degree: 3}\n"
         "search:\n  strategy: ga\n  ga: {population: 10, parents: 4, generations: 4, mutants: 4, crossovers: 2}\n";
}

const std::string kInProcess = "{kind: synthetic-test-double, layers: 12, heads: 2, noise: 0.05}";

std::vector<std::string> served_double(double latency_ms) {
  return {"--synthetic-test-double", "--synthetic-layers", "12", "--synthetic-heads", "2", "--synthetic-noise", "0.05",
          "--synthetic-seed", std::to_string(kSeed), "--synthetic-latency-ms", std::to_string(latency_ms)};
}

// Runs ga-run to completion (at most 5 minutes); its exit code.
int run_ga_run(const fs::path& yaml, const fs::path& db, const fs::path& log) {
  const std::string command = std::string("timeout 300 '") + midtune::testing::binary_dir() + "/ga-run' '" + yaml.string() +
                              "' --db '" + db.string() + "' --quiet > '" + log.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Every individual of the search: candidate, genome and fitness to 17 digits.
std::vector<std::string> individuals(const fs::path& db) {
  sqlite3* handle = nullptr;
  std::vector<std::string> rows;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(handle);
    ADD_FAILURE() << "cannot open " << db;
    return rows;
  }
  sqlite3_stmt* stmt = nullptr;
  const char* sql =
      "SELECT candidate_id || ' ' || generation || ' ' || genome || ' ' || printf('%.17g', fitness) "
      "FROM individuals ORDER BY candidate_id";
  if (sqlite3_prepare_v2(handle, sql, -1, &stmt, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(handle);
  } else {
    while (sqlite3_step(stmt) == SQLITE_ROW) rows.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return rows;
}

// Individuals stored so far in a database another process is writing; 0
// while the file or the table does not exist yet.
std::size_t count_individuals(const fs::path& db) {
  if (!fs::exists(db)) return 0;
  sqlite3* handle = nullptr;
  std::size_t count = 0;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(handle, "SELECT count(*) FROM individuals", -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
      count = static_cast<std::size_t>(sqlite3_column_int64(stmt, 0));
    sqlite3_finalize(stmt);
  }
  sqlite3_close(handle);
  return count;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ServerSearch : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "midtune-server-search-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> search(const std::string& name, const std::string& backend) {
    std::ofstream(dir_ / (name + ".yaml")) << experiment(backend);
    const int rc = run_ga_run(dir_ / (name + ".yaml"), dir_ / (name + ".db"), dir_ / (name + ".log"));
    EXPECT_EQ(rc, 0) << read_text(dir_ / (name + ".log"));
    return individuals(dir_ / (name + ".db"));
  }

  static std::string server_backend(const ServeProcess& a, const ServeProcess& b) {
    return "{kind: server, endpoints: [" + a.url() + ", " + b.url() + "], timeout_s: 10, retries: 2}";
  }

  fs::path dir_;
};

TEST_F(ServerSearch, TwoGaServeProcessesGiveTheInProcessSearch) {
  const auto reference = search("in-process", kInProcess);
  ASSERT_FALSE(reference.empty());
  ServeProcess a(served_double(0)), b(served_double(0));
  EXPECT_EQ(search("served", server_backend(a, b)), reference);
}

TEST_F(ServerSearch, KillingOneServerMidSearchChangesNothing) {
  const auto reference = search("in-process", kInProcess);
  ServeProcess doomed(served_double(20)), survivor(served_double(20));
  // Kill as soon as the first individuals are stored, and remember how many
  // there were then: fewer than at the end means the kill landed mid-search.
  std::size_t stored_at_kill = 0;
  std::atomic<bool> done{false};
  std::thread killer([&] {
    while (!done) {
      stored_at_kill = count_individuals(dir_ / "served.db");
      if (stored_at_kill > 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    doomed.signal(SIGKILL);
  });
  const auto served = search("served", server_backend(doomed, survivor));
  done = true;
  killer.join();
  EXPECT_EQ(served, reference);
  EXPECT_GT(stored_at_kill, 0u);
  EXPECT_LT(stored_at_kill, reference.size()) << "the kill landed after the search; nothing was tested";
}

}  // namespace
}  // namespace midtune::server
