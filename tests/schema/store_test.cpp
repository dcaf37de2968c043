#include "schema/store.hpp"

#include <gtest/gtest.h>

#include "tests/cli/temp_dir.hpp"
#include "tests/test_paths.hpp"
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace midtune {
namespace {

namespace fs = std::filesystem;

class StoreTest : public testing::TempDirTest {
 protected:
  std::string db_path() const { return path("results.db"); }
};

EvaluationRecord sample_evaluation(const std::string& key) {
  EvaluationRecord r;
  r.cache_key = key;
  r.key_hash = "hash-of-" + key;
  r.intervention = R"({"rope_scale":[[1.5]]})";
  r.dataset_slice = R"({"kind":"kv"})";
  r.metric = "teacher_forced";
  r.model = "m";
  r.position_scores = {{0.0, 1.0, 2, 2}, {1.0, 0.5, 1, 2}};
  r.fitness_inputs = {{"beginning", 1.0}, {"middle", 0.75}, {"end", 0.5}};
  r.wall_seconds = 0.25;
  return r;
}

TEST_F(StoreTest, NewFileReachesLatestVersionInWalMode) {
  Store store(db_path());
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  EXPECT_GE(latest_schema_version(), 2);
  sql::Database reader(db_path(), sql::Database::Mode::read_only);
  auto s = reader.prepare("PRAGMA journal_mode");
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.column_text(0), "wal");
}

TEST_F(StoreTest, MigratesAVersionOneFileForward) {
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write_create);
    db.exec(schema_migrations().front().sql);
    db.exec("PRAGMA user_version = 1");
  }
  Store store(db_path());
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  sql::Database reader(db_path(), sql::Database::Mode::read_only);
  auto s = reader.prepare("SELECT count(*) FROM sqlite_master WHERE name = 'individuals_by_generation'");
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.column_int64(0), 1);
  Store again(db_path());  // reopening applies nothing twice
  EXPECT_EQ(again.schema_version(), latest_schema_version());
}

TEST_F(StoreTest, RefusesAFileFromANewerMidtune) {
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write_create);
    db.exec("PRAGMA user_version = 999");
  }
  try {
    Store store(db_path());
    FAIL() << "expected a refusal";
  } catch (const sql::SqlError& e) {
    EXPECT_NE(std::string(e.what()).find("999"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(db_path()), std::string::npos) << e.what();
  }
}

TEST_F(StoreTest, ErrorsNameTheFileAndTheSql) {
  Store store(db_path());
  sql::Database db(db_path(), sql::Database::Mode::read_write_create);
  try {
    db.exec("SELECT * FROM no_such_table");
    FAIL();
  } catch (const sql::SqlError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(db_path()), std::string::npos) << what;
    EXPECT_NE(what.find("no_such_table"), std::string::npos) << what;
  }
}

TEST_F(StoreTest, EvaluationCacheRoundTripsAndIgnoresFailures) {
  Store store(db_path());
  EXPECT_FALSE(store.find_evaluation("k1"));
  EvaluationRecord failed = sample_evaluation("k1");
  failed.status = "failed";
  failed.error = "backend died";
  store.insert_evaluation(failed, {});
  EXPECT_FALSE(store.find_evaluation("k1")) << "a failed evaluation must never be served from the cache";

  const EvaluationRecord ok = sample_evaluation("k1");
  const std::int64_t id = store.insert_evaluation(ok, {{"s1", 0.0, true, "v", -0.1, 10}, {"s2", 1.0, false, "x", {}, 12}});
  auto found = store.find_evaluation("k1");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, id);
  EXPECT_EQ(found->position_scores, ok.position_scores);
  EXPECT_EQ(found->fitness_inputs, ok.fitness_inputs);
  EXPECT_DOUBLE_EQ(found->wall_seconds, 0.25);
  sql::Database reader(db_path(), sql::Database::Mode::read_only);
  auto count = reader.prepare("SELECT count(*), sum(correct) FROM sample_results WHERE evaluation_id = ?");
  count.bind_all(id);
  ASSERT_TRUE(count.step());
  EXPECT_EQ(count.column_int64(0), 2);
  EXPECT_EQ(count.column_int64(1), 1);
  EXPECT_THROW(store.insert_evaluation(ok, {}), sql::SqlError) << "cache keys are unique";
}

TEST_F(StoreTest, TransactionRollsBackWhenNotCommitted) {
  Store store(db_path());
  sql::Database db(db_path(), sql::Database::Mode::read_write_create);
  const std::string insert =
      "INSERT INTO experiments (name, config_text, config_hash, search_config) VALUES ('k2', '', '', '{}')";
  {
    sql::Transaction tx(db);
    db.exec(insert);
  }
  EXPECT_FALSE(store.find_experiment("k2"));
  {
    sql::Transaction tx(db);
    db.exec(insert);
    tx.commit();
  }
  EXPECT_TRUE(store.find_experiment("k2"));
}

TEST_F(StoreTest, ExperimentsIndividualsGenerationsAndRuns) {
  Store store(db_path());
  ExperimentRecord e;
  e.name = "exp";
  e.config_text = "name: exp\n";
  e.config_hash = "abc";
  e.search_config = {{"seed", 1}};
  const ExperimentRecord created = store.create_experiment(e);
  EXPECT_GT(created.id, 0);
  EXPECT_EQ(store.find_experiment("exp")->search_config, e.search_config);
  EXPECT_THROW(store.create_experiment(e), sql::SqlError) << "names are unique";

  const std::int64_t run = store.start_run(created.id);
  store.heartbeat(run, 1, 60, 0.5);
  const std::int64_t eval = store.insert_evaluation(sample_evaluation("k3"), {});
  IndividualRecord ind;
  ind.experiment_id = created.id;
  ind.candidate_id = 7;
  ind.generation = 0;
  ind.genome = {0, 1.5, 29, 1.2};
  ind.genome_hash = "h";
  ind.origin = "mutation";
  ind.parents = {3};
  ind.fitness = 0.625;
  ind.evaluation_id = eval;
  ind.cache_hit = true;
  ind.run_id = run;
  store.insert_individual(ind);
  auto back = store.find_individual(created.id, 7);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->genome, ind.genome);
  EXPECT_EQ(back->parents, ind.parents);
  EXPECT_TRUE(back->cache_hit);
  EXPECT_EQ(back->origin, "mutation");
  ind.origin = "bogus";
  ind.candidate_id = 8;
  EXPECT_THROW(store.insert_individual(ind), sql::SqlError) << "origin is checked";

  EXPECT_FALSE(store.latest_generation(created.id));
  store.save_generation({created.id, 0, {7}, {{"rng", "x"}}, 0.625, 0.625});
  store.save_generation({created.id, 1, {7}, {{"rng", "y"}}, 0.7, 0.6});
  EXPECT_EQ(store.latest_generation(created.id)->strategy_state["rng"], "y");
  EXPECT_EQ(store.generations(created.id).size(), 2u);
  store.finish_run(run);
  sql::Database reader(db_path(), sql::Database::Mode::read_only);
  auto r = reader.prepare("SELECT evaluations, prompts, finished_at IS NOT NULL FROM runs WHERE id = ?");
  r.bind_all(run);
  ASSERT_TRUE(r.step());
  EXPECT_EQ(r.column_int64(0), 1);
  EXPECT_EQ(r.column_int64(1), 60);
  EXPECT_EQ(r.column_int64(2), 1);
}

// Racing's rows (schema 8): a partial evaluation grows sample by sample,
// is never served by the cache until complete, and a dropped individual's
// estimate is never the experiment's best.
TEST_F(StoreTest, PartialEvaluationsAreNeverServedAsWhole) {
  Store store(db_path());
  const ExperimentRecord e = store.create_experiment({-1, "exp", "name: exp\n", "h", {{"seed", 1}}, "", ""});
  const std::int64_t run = store.start_run(e.id);
  const auto sample = [](const std::string& id, bool correct) {
    SampleRecord s;
    s.sample_id = id;
    s.correct = correct;
    s.output = correct ? "gold" : "other";
    return s;
  };
  // The split is items a, b, c: complete once all three are stored.
  const auto summarise = [](const std::vector<SampleRecord>& all) {
    int correct = 0;
    for (const SampleRecord& s : all) correct += s.correct;
    return SampleSummary{{{0.0, static_cast<double>(correct) / all.size(), correct, static_cast<int>(all.size())}},
                         nlohmann::json::object(), all.size() == 3};
  };
  EvaluationRecord record = sample_evaluation("race");
  const ExtendedEvaluation first = store.add_samples(run, record, {sample("a", true), sample("b", false)}, summarise);
  EXPECT_FALSE(first.complete);
  EXPECT_EQ(first.samples.size(), 2u);
  EXPECT_FALSE(store.find_evaluation("race")) << "a partial row is not a cache hit";
  ASSERT_TRUE(store.find_partial_evaluation("race"));
  EXPECT_EQ(store.find_partial_evaluation("race")->position_scores.front().samples, 2);
  EXPECT_EQ(store.totals().evaluations_partial, 1);
  EXPECT_EQ(store.totals().evaluations_ok, 0);

  IndividualRecord dropped;
  dropped.experiment_id = e.id;
  dropped.candidate_id = 1;
  dropped.genome = {1.0};
  dropped.genome_hash = "g1";
  dropped.origin = "mutation";
  dropped.fitness = 0.99;  // an estimate on 2 samples, above any exact fitness here
  dropped.raced_samples = 2;
  dropped.evaluation_id = first.id;
  // Racing may drop a candidate before any individual has the whole split:
  // its size, and so the passes racing saved, are unknown until one has.
  store.insert_individual(dropped);
  EXPECT_EQ(store.experiment_statuses().front().split_samples, 0);
  EXPECT_EQ(store.experiment_statuses().front().saved_by_racing, 0);
  IndividualRecord exact = dropped;
  exact.candidate_id = 0;
  exact.origin = "init";
  exact.fitness = 0.5;
  exact.raced_samples.reset();
  // Sample "b" again (another process stored it meanwhile) is kept once; the
  // individual lands in the same transaction.
  const ExtendedEvaluation second =
      store.add_samples(run, record, {sample("b", false), sample("c", true)}, summarise,
                        [&](const ExtendedEvaluation& now) -> std::optional<IndividualRecord> {
                          EXPECT_TRUE(now.complete);
                          exact.evaluation_id = now.id;
                          return exact;
                        });
  EXPECT_EQ(second.id, first.id);
  EXPECT_TRUE(second.complete);
  EXPECT_EQ(store.evaluation_samples(second.id).size(), 3u);
  ASSERT_TRUE(store.find_evaluation("race"));
  EXPECT_TRUE(store.find_evaluation("race")->complete);
  EXPECT_FALSE(store.find_partial_evaluation("race"));
  EXPECT_TRUE(store.find_individual(e.id, 0));
  // A completed row adds nothing more.
  const ExtendedEvaluation third = store.add_samples(run, record, {sample("a", false)}, summarise);
  EXPECT_TRUE(third.was_complete);
  EXPECT_TRUE(store.evaluation_samples(third.id).front().correct) << "the stored sample is kept";

  EXPECT_EQ(store.find_individual(e.id, 1)->raced_samples, 2);
  EXPECT_EQ(store.best_individual(e.id)->individual.candidate_id, 0) << "a raced estimate is never the best";
  EXPECT_DOUBLE_EQ(store.fitness_of_candidates(e.id, {0, 1})->best, 0.5);
  const ExperimentStatus status = store.experiment_statuses().front();
  EXPECT_EQ(status.raced, 1);
  EXPECT_EQ(status.split_samples, 3);
  EXPECT_EQ(status.saved_by_racing, 1);
  EXPECT_EQ(status.best_fitness, 0.5);
  EXPECT_EQ(status.prompts, 4.0) << "a, b, then b and c";
}

// Racing hands add_samples() the samples it holds of the row: the result is
// the row as it reads back, whether those were still all of it (merged in
// memory, SQLite's -0.0 and NaN included) or another connection added
// samples meanwhile (read back).
TEST_F(StoreTest, AddSamplesWithKnownSamplesReturnsTheRowAsStored) {
  Store store(db_path());
  const ExperimentRecord e = store.create_experiment({-1, "exp", "name: exp\n", "h", {{"seed", 1}}, "", ""});
  const std::int64_t run = store.start_run(e.id);
  const auto sample = [](const std::string& id, double logprob) {
    SampleRecord s;
    s.sample_id = id;
    s.gold_position = -0.0;
    s.correct = logprob > -1.0;
    s.output = "out " + id;
    s.gold_logprob = logprob;
    s.prompt_tokens = static_cast<int>(id.size());
    return s;
  };
  const auto summarise = [](const std::vector<SampleRecord>& all) {
    return SampleSummary{{{0.0, 0.0, 0, static_cast<int>(all.size())}}, nlohmann::json::object(), all.size() == 5};
  };
  const auto same = [](const std::vector<SampleRecord>& a, const std::vector<SampleRecord>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].sample_id, b[i].sample_id);
      EXPECT_EQ(std::signbit(a[i].gold_position), std::signbit(b[i].gold_position)) << a[i].sample_id;
      EXPECT_EQ(a[i].gold_position, b[i].gold_position);
      EXPECT_EQ(a[i].correct, b[i].correct);
      EXPECT_EQ(a[i].output, b[i].output);
      EXPECT_EQ(a[i].gold_logprob.has_value(), b[i].gold_logprob.has_value()) << a[i].sample_id;
      if (a[i].gold_logprob && b[i].gold_logprob) {
        EXPECT_EQ(*a[i].gold_logprob, *b[i].gold_logprob);
        EXPECT_EQ(std::signbit(*a[i].gold_logprob), std::signbit(*b[i].gold_logprob)) << a[i].sample_id;
      }
      EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    }
  };
  const EvaluationRecord record = sample_evaluation("known");
  // Out of order, an id twice (the first is stored), a NaN and a -0.0.
  const ExtendedEvaluation first =
      store.add_samples(run, record, {sample("d", -0.0), sample("b", -2.0), sample("d", -3.0)}, summarise);
  same(first.samples, store.evaluation_samples(first.id));
  const ExtendedEvaluation second = store.add_samples(run, record, {sample("a", std::nan("")), sample("b", -5.0)},
                                                      summarise, {}, KnownSamples{first.id, &first.samples});
  same(second.samples, store.evaluation_samples(second.id));
  // Another connection adds "c" to the row: the caller's samples are stale.
  {
    sql::Database other(db_path(), sql::Database::Mode::read_write);
    auto add = other.prepare(
        "INSERT INTO sample_results (evaluation_id, sample_id, gold_position, correct, output, gold_logprob, "
        "prompt_tokens) VALUES (?, 'c', 0.5, 1, 'theirs', -0.25, 7)");
    add.bind_all(second.id);
    add.run();
  }
  const ExtendedEvaluation third =
      store.add_samples(run, record, {sample("e", -1.5)}, summarise, {}, KnownSamples{second.id, &second.samples});
  same(third.samples, store.evaluation_samples(third.id));
  EXPECT_EQ(third.samples.size(), 5u);
  EXPECT_TRUE(third.complete);
  ASSERT_TRUE(store.evaluation_state("known"));
  EXPECT_EQ(store.evaluation_state("known")->samples, 5);
  EXPECT_TRUE(store.evaluation_state("known")->complete);
  EXPECT_FALSE(store.evaluation_state("missing"));
}

// `ga-run status` and `report` open a file read-only, unmigrated: one from
// before racing reads as "every evaluation complete, nothing raced".
TEST_F(StoreTest, ReadOnlyFileFromBeforeRacingStillReads) {
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write_create);
    for (int v = 0; v < 7; ++v) db.exec(schema_migrations()[v].sql);
    db.exec("PRAGMA user_version = 7");
    db.exec("PRAGMA application_id = " + std::to_string(kMidtuneApplicationId));
    db.exec("INSERT INTO experiments (name, config_text, config_hash, search_config) VALUES ('old', '', 'h', '{}')");
    db.exec(
        "INSERT INTO evaluations (cache_key, key_hash, intervention, dataset_slice, metric, model, position_scores, "
        "fitness_inputs, status) VALUES ('k', 'h', '{}', '{}', 'tf', 'm', '[]', '{}', 'ok')");
    db.exec(
        "INSERT INTO individuals (experiment_id, candidate_id, generation, genome, genome_hash, origin, parents, "
        "fitness, evaluation_id, cache_hit) VALUES (1, 0, 0, '[1]', 'g', 'init', '[]', 0.5, 1, 0)");
  }
  Store store(db_path(), Store::Access::read_only);
  EXPECT_EQ(store.schema_version(), 7);
  EXPECT_EQ(store.totals().evaluations_ok, 1);
  EXPECT_TRUE(store.find_evaluation("k"));
  EXPECT_EQ(store.best_individual(1)->individual.fitness, 0.5);
  EXPECT_FALSE(store.find_individual(1, 0)->raced_samples);
  const ExperimentStatus status = store.experiment_statuses().front();
  EXPECT_EQ(status.raced, 0);
  EXPECT_EQ(status.saved_by_racing, 0);
}

// A file from before runs recorded their provenance (schema 9) reads with
// runs and generations that say nothing about what computed them; opened
// for writing it is migrated and new runs record it.
TEST_F(StoreTest, AFileFromBeforeRunProvenanceReadsAndMigrates) {
  {
    sql::Database db(db_path(), sql::Database::Mode::read_write_create);
    for (int v = 0; v < 9; ++v) db.exec(schema_migrations()[v].sql);
    db.exec("PRAGMA user_version = 9");
    db.exec("PRAGMA application_id = " + std::to_string(kMidtuneApplicationId));
    db.exec("INSERT INTO experiments (name, config_text, config_hash, search_config) VALUES ('old', '', 'h', '{}')");
    db.exec("INSERT INTO runs (experiment_id, host, pid) VALUES (1, 'h', 1)");
    db.exec("INSERT INTO generations (experiment_id, generation, population, strategy_state) VALUES (1, 0, '[]', '{}')");
  }
  {
    Store store(db_path(), Store::Access::read_only);
    EXPECT_EQ(store.schema_version(), 9);
    const auto runs = store.run_provenances(1);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_TRUE(runs[0].provenance.is_null());
    ASSERT_EQ(store.generation_summaries(1).size(), 1u);
    EXPECT_FALSE(store.generation_summaries(1)[0].run_id);
  }
  Store store(db_path());
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  const std::int64_t run = store.start_run(1, {{"execution", {{"kernel_path", "avx2"}}}});
  store.save_checkpoint({1, 1, nlohmann::json::array(), nlohmann::json::object(), std::nullopt, std::nullopt}, run);
  const auto runs = store.run_provenances(1);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_TRUE(runs[0].provenance.is_null()) << "an old run is left as it was";
  EXPECT_EQ(runs[1].provenance["execution"]["kernel_path"], "avx2");
  EXPECT_FALSE(store.generation_summaries(1)[0].run_id);
  EXPECT_EQ(store.generation_summaries(1)[1].run_id, run);
}

TEST_F(StoreTest, ReadOnlyConnectionRefusesWrites) {
  { Store store(db_path()); }
  sql::Database ro(db_path(), sql::Database::Mode::read_only);
  auto select = ro.prepare("SELECT count(*) FROM experiments");
  EXPECT_TRUE(select.readonly());
  auto insert = ro.prepare("INSERT INTO experiments (name, config_text, config_hash, search_config) VALUES ('a','','','{}')");
  EXPECT_FALSE(insert.readonly());
  EXPECT_THROW(insert.run(), sql::SqlError);
}

// A writer killed mid-run leaves a WAL that needs recovery; the read-only
// connection (query, status, report) must still read what was committed.
TEST_F(StoreTest, ReadOnlyConnectionReadsADatabaseLeftByAKilledWriter) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Store store(db_path());
    store.insert_evaluation(sample_evaluation("committed"), {});
    _exit(0);  // no close: the WAL and its index stay behind, as after kill -9
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_TRUE(fs::exists(db_path() + "-wal"));
  sql::Database ro(db_path(), sql::Database::Mode::read_only);
  auto s = ro.prepare("SELECT cache_key FROM evaluations");
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.column_text(0), "committed");
}

TEST_F(StoreTest, PrepareRejectsMoreThanOneStatement) {
  Store store(db_path());
  sql::Database db(db_path(), sql::Database::Mode::read_write_create);
  EXPECT_THROW(db.prepare("SELECT 1; DELETE FROM experiments"), sql::SqlError);
  EXPECT_NO_THROW(db.prepare("SELECT 1;  \n"));
}

// Every example in schema/queries.sql runs on a populated file and returns rows.
TEST_F(StoreTest, ExampleQueriesRun) {
  Store store(db_path());
  ExperimentRecord e;
  e.name = "exp";
  e.config_text = "";
  e.config_hash = "";
  e.search_config = nlohmann::json::object();
  const auto exp = store.create_experiment(e);
  const std::int64_t eval = store.insert_evaluation(sample_evaluation("k4"), {{"s1", 0.0, true, "v", -0.1, 10}});
  for (int c = 0; c < 4; ++c) {
    IndividualRecord ind;
    ind.experiment_id = exp.id;
    ind.candidate_id = c;
    ind.generation = c / 2;
    ind.genome = {c};
    ind.genome_hash = "h";
    ind.origin = "init";
    ind.fitness = 0.1 * c;
    ind.evaluation_id = eval;
    ind.cache_hit = c > 0;
    if (c == 3) ind.raced_samples = 1;  // racing dropped the last (schema v8)
    store.insert_individual(ind);
  }
  // One `ga-run phs-search` candidate (schema v5) for the phs_channels example.
  store.insert_phs_channels({{"k", "m", nlohmann::json::object(), 3, 9, {2}, 1, 0.01, 1.5, 1.6, 1, ""}});
  std::ifstream file(midtune::testing::source_dir() + "/schema/queries.sql");
  ASSERT_TRUE(file) << "schema/queries.sql missing";
  std::string line, statement;
  int ran = 0;
  while (std::getline(file, line)) {
    if (statement.empty() && (line.empty() || line.rfind("--", 0) == 0)) continue;
    statement += line + "\n";
    if (!sqlite3_complete(statement.c_str())) continue;
    sql::Database reader(db_path(), sql::Database::Mode::read_only);
    auto s = reader.prepare(statement);
    EXPECT_TRUE(s.readonly()) << statement;
    EXPECT_TRUE(s.step()) << "no rows from:\n" << statement;
    statement.clear();
    ++ran;
  }
  EXPECT_GE(ran, 3);
}

}  // namespace
}  // namespace midtune
