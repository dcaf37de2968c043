// The typed queries and the one-transaction writes the search, the held-out
// step, status, report, query and phs-search use, on a real SQLite file.
#include <gtest/gtest.h>

#include <stdexcept>

#include "schema/store.hpp"
#include "tests/cli/temp_dir.hpp"

namespace midtune {
namespace {

using nlohmann::json;

class StoreQueriesTest : public testing::TempDirTest {
 protected:
  std::string db_path() const { return path("results.db"); }

  static EvaluationRecord evaluation(const std::string& key, const std::string& model = "m") {
    EvaluationRecord r;
    r.cache_key = key;
    r.key_hash = "hash-of-" + key;
    r.intervention = R"({"rope_scale":[[1.5]]})";
    r.dataset_slice = R"({"kind":"kv"})";
    r.metric = "teacher_forced";
    r.model = model;
    r.position_scores = {{0.0, 1.0, 2, 2}, {1.0, 0.5, 1, 2}};
    r.fitness_inputs = {{"mean_percent", 75.0}};
    r.wall_seconds = 0.5;
    return r;
  }

  static ExperimentRecord experiment(const std::string& name) {
    ExperimentRecord e;
    e.name = name;
    e.search_config = {{"seed", 1}};
    return e;
  }

  // An individual of `experiment_id` pointing at a new evaluation `key`.
  static void add_individual(Store& store, std::int64_t experiment_id, std::int64_t candidate, int generation,
                             double fitness, const std::string& key, bool cache_hit = false,
                             const std::string& model = "m") {
    const std::int64_t eval =
        store.find_evaluation(key) ? store.find_evaluation(key)->id : store.insert_evaluation(evaluation(key, model), {});
    IndividualRecord r;
    r.experiment_id = experiment_id;
    r.candidate_id = candidate;
    r.generation = generation;
    r.genome = {candidate};
    r.genome_hash = "h";
    r.origin = "init";
    r.fitness = fitness;
    r.evaluation_id = eval;
    r.cache_hit = cache_hit;
    store.insert_individual(r);
  }

  static IndividualRecord individual_for(std::int64_t experiment_id, std::int64_t candidate, std::int64_t run,
                                         const StoredEvaluation& e) {
    IndividualRecord r;
    r.experiment_id = experiment_id;
    r.candidate_id = candidate;
    r.genome = {candidate};
    r.genome_hash = "h";
    r.origin = "init";
    r.fitness = e.position_scores.at(1).accuracy;
    r.evaluation_id = e.id;
    r.cache_hit = e.cache_hit;
    r.run_id = run;
    return r;
  }
};

TEST_F(StoreQueriesTest, RecordIndividualStoresAFreshEvaluationOnceAndServesTheCacheAfter) {
  Store store(db_path());
  const auto exp = store.create_experiment(experiment("e"));
  const std::int64_t run = store.start_run(exp.id);
  int evaluations = 0;
  auto fresh = [&] {
    ++evaluations;
    return NewEvaluation{evaluation("k"), {{"s1", 0.0, true, "v", {}, 10}, {"s2", 1.0, false, "x", {}, 12}}};
  };
  const IndividualRecord first = store.record_individual(
      run, "k", fresh, [&](const StoredEvaluation& e) { return individual_for(exp.id, 0, run, e); });
  EXPECT_EQ(evaluations, 1);
  EXPECT_FALSE(first.cache_hit);
  EXPECT_DOUBLE_EQ(first.fitness, 0.5);
  const IndividualRecord second = store.record_individual(
      run, "k", fresh, [&](const StoredEvaluation& e) { return individual_for(exp.id, 1, run, e); });
  EXPECT_EQ(evaluations, 1) << "a stored evaluation is never run again";
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(second.evaluation_id, first.evaluation_id);
  ASSERT_TRUE(store.find_individual(exp.id, 1));
  EXPECT_TRUE(store.find_individual(exp.id, 1)->cache_hit);

  const auto statuses = store.experiment_statuses();
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(statuses[0].individuals, 2);
  EXPECT_EQ(statuses[0].evaluated, 1);
  EXPECT_EQ(statuses[0].from_cache, 1);
  EXPECT_DOUBLE_EQ(statuses[0].prompts, 2.0) << "only the fresh evaluation counts its prompts";
  EXPECT_DOUBLE_EQ(statuses[0].backend_seconds, 0.5);
  EXPECT_EQ(store.totals().sample_results, 2);
}

TEST_F(StoreQueriesTest, RecordIndividualStoresNothingWhenTheIndividualCannotBeBuilt) {
  Store store(db_path());
  const auto exp = store.create_experiment(experiment("e"));
  const std::int64_t run = store.start_run(exp.id);
  EXPECT_THROW(store.record_individual(
                   run, "k", [] { return NewEvaluation{evaluation("k"), {}}; },
                   [](const StoredEvaluation&) -> IndividualRecord { throw std::runtime_error("fitness failed"); }),
               std::runtime_error);
  EXPECT_FALSE(store.find_evaluation("k")) << "the evaluation and the individual land together or not at all";
  EXPECT_EQ(store.totals().evaluations_ok, 0);
}

TEST_F(StoreQueriesTest, BestIndividualOtherModelAndPopulationFitness) {
  Store store(db_path());
  const auto exp = store.create_experiment(experiment("e"));
  EXPECT_FALSE(store.best_individual(exp.id));
  add_individual(store, exp.id, 3, 0, 0.75, "a");
  add_individual(store, exp.id, 1, 0, 0.75, "b");
  add_individual(store, exp.id, 2, 0, 0.25, "c");
  const auto best = store.best_individual(exp.id);
  ASSERT_TRUE(best);
  EXPECT_EQ(best->individual.candidate_id, 1) << "ties: the lowest candidate id";
  EXPECT_EQ(best->intervention, json::parse(R"({"rope_scale":[[1.5]]})"));
  EXPECT_EQ(best->position_scores, to_json(evaluation("b").position_scores));
  EXPECT_EQ(best->fitness_inputs["mean_percent"], 75.0);

  EXPECT_FALSE(store.other_model(exp.id, "m"));
  add_individual(store, exp.id, 4, 1, 0.1, "d", false, "other-model");
  EXPECT_EQ(store.other_model(exp.id, "m"), "other-model");

  const auto stats = store.fitness_of_candidates(exp.id, json::array({2, 3, 99}));
  ASSERT_TRUE(stats);
  EXPECT_DOUBLE_EQ(stats->best, 0.75);
  EXPECT_DOUBLE_EQ(stats->mean, 0.5);
  EXPECT_FALSE(store.fitness_of_candidates(exp.id, json::array({98, 99}))) << "none of them stored";
}

TEST_F(StoreQueriesTest, CheckpointsAndGenerationSummaries) {
  Store store(db_path());
  const auto exp = store.create_experiment(experiment("e"));
  const std::int64_t run = store.start_run(exp.id);
  add_individual(store, exp.id, 0, 0, 0.5, "a");
  add_individual(store, exp.id, 1, 0, 0.5, "a", true);
  add_individual(store, exp.id, 2, 0, 0.25, "b");
  store.save_checkpoint({exp.id, 0, {0, 1, 2}, {{"rng", "x"}}, 0.5, 0.4}, run);
  store.save_checkpoint({exp.id, 1, {0, 1}, {{"rng", "y"}}, std::nullopt, std::nullopt}, run);
  EXPECT_EQ(store.latest_generation(exp.id)->strategy_state["rng"], "y");
  const auto summaries = store.generation_summaries(exp.id);
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].generation, 0);
  EXPECT_DOUBLE_EQ(summaries[0].best, 0.5);
  EXPECT_DOUBLE_EQ(summaries[0].mean, 0.4);
  EXPECT_EQ(summaries[0].population, 3);
  EXPECT_EQ(summaries[0].evaluated, 2);
  EXPECT_EQ(summaries[0].from_cache, 1);
  EXPECT_EQ(summaries[1].population, 2);
  EXPECT_EQ(summaries[1].evaluated, 0);
  EXPECT_DOUBLE_EQ(summaries[1].best, 0.0) << "no stored best reads as 0";
}

TEST_F(StoreQueriesTest, HeldoutRowsInReportOrderAndReplacedByRole) {
  Store store(db_path());
  const auto exp = store.create_experiment(experiment("e"));
  const std::int64_t a = store.insert_evaluation(evaluation("a"), {});
  const std::int64_t b = store.insert_evaluation(evaluation("b"), {});
  store.record_heldout(exp.id, "best", "heldout", a);
  store.record_heldout(exp.id, "pi-mean", "heldout", a);
  store.record_heldout(exp.id, "baseline", "heldout", a);
  store.record_heldout(exp.id, "baseline", "heldout", b);  // a rerun replaces the row
  const auto rows = store.heldout_rows(exp.id);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].role, "baseline");
  EXPECT_EQ(rows[1].role, "pi-mean");
  EXPECT_EQ(rows[2].role, "best");
  EXPECT_EQ(rows[0].split, "heldout");
  EXPECT_EQ(rows[0].metric, "teacher_forced");
  EXPECT_EQ(rows[0].intervention, json::parse(R"({"rope_scale":[[1.5]]})"));
  EXPECT_EQ(rows[0].fitness_inputs["mean_percent"], 75.0);
  EXPECT_TRUE(store.heldout_rows(exp.id + 1).empty());
}

TEST_F(StoreQueriesTest, StatusFiguresPerExperiment) {
  Store store(db_path());
  const auto done = store.create_experiment(experiment("done"));
  store.create_experiment(experiment("idle"));
  const std::int64_t run = store.start_run(done.id);
  store.heartbeat(run, 1, 40, 2.0);
  add_individual(store, done.id, 0, 0, 0.5, "a");
  store.insert_evaluation([] {
    EvaluationRecord failed = evaluation("f");
    failed.status = "failed";
    failed.error = "boom";
    return failed;
  }(), {});
  store.finish_run(run);
  const StoreTotals totals = store.totals();
  EXPECT_EQ(totals.evaluations_ok, 1);
  EXPECT_EQ(totals.evaluations_failed, 1);
  const auto statuses = store.experiment_statuses();
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[0].name, "done");
  EXPECT_EQ(statuses[0].runs, 1);
  EXPECT_EQ(statuses[0].best_fitness, 0.5);
  EXPECT_DOUBLE_EQ(statuses[0].prompts / statuses[0].backend_seconds, 20.0);
  ASSERT_TRUE(statuses[0].last_run);
  EXPECT_EQ(statuses[0].last_run->rfind("complete (", 0), 0u) << *statuses[0].last_run;
  EXPECT_FALSE(statuses[0].unfinished_run) << "the run finished";
  EXPECT_EQ(statuses[1].name, "idle");
  EXPECT_FALSE(statuses[1].last_run);
  EXPECT_FALSE(statuses[1].best_fitness);
}

TEST_F(StoreQueriesTest, PhsChannelsShareOneCreationTime) {
  Store store(db_path());
  store.insert_phs_channels({{"key", "model", {{"tokens", 96}}, 7, 9, {2, 3}, 1, 0.01, 1.5, 1.6, 1, "ignored"},
                             {"key", "model", {{"tokens", 96}}, 3, 8, {4}, -1, 0.02, 1.7, 1.6, 2, "ignored"}});
  const auto rows = store.phs_channels();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].channel, 7);
  EXPECT_EQ(rows[0].monotone_layer_list, (std::vector<int>{2, 3}));
  EXPECT_EQ(rows[1].direction, -1);
  EXPECT_EQ(rows[1].rank, 2);
  EXPECT_EQ(rows[0].settings["tokens"], 96);
  EXPECT_NE(rows[0].created_at, "ignored");
  EXPECT_EQ(rows[0].created_at, rows[1].created_at);
}

TEST_F(StoreQueriesTest, ReadOnlyStoreReadsButNeitherMigratesNorWrites) {
  EXPECT_THROW(Store(db_path(), Store::Access::read_only), sql::SqlError) << "the file must exist";
  {
    Store store(db_path());
    store.create_experiment(experiment("first"));
    store.create_experiment(experiment("second"));
  }
  Store reader(db_path(), Store::Access::read_only);
  EXPECT_EQ(reader.latest_experiment()->name, "second");
  EXPECT_EQ(reader.experiments().size(), 2u);
  EXPECT_THROW(reader.create_experiment(experiment("third")), sql::SqlError);
}

TEST_F(StoreQueriesTest, ReadOnlyQueryReturnsRowsAndRefusesWrites) {
  {
    Store store(db_path());
    store.create_experiment(experiment("e"));
  }
  const QueryResult result = run_read_only_query(db_path(), "SELECT name, NULL AS missing FROM experiments");
  EXPECT_EQ(result.columns, (std::vector<std::string>{"name", "missing"}));
  ASSERT_EQ(result.rows.size(), 1u);
  EXPECT_EQ(result.rows[0][0], "e");
  EXPECT_FALSE(result.rows[0][1]);
  try {
    run_read_only_query(db_path(), "DELETE FROM experiments");
    FAIL() << "expected a refusal";
  } catch (const QueryRefused& e) {
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_read_only_query(db_path(), "SELEC nonsense"), sql::SqlError);
  EXPECT_EQ(run_read_only_query(db_path(), "SELECT count(*) FROM experiments").rows[0][0], "1");
}

}  // namespace
}  // namespace midtune
