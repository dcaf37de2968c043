// The run loop on the synthetic test double with a small fixture strategy:
// completion, the evaluation cache, resume after an interruption, refusal of
// an edited search.
#include "core/search/search_run.hpp"

#include <gtest/gtest.h>

#include "tests/cli/temp_dir.hpp"

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "backends/synthetic/synthetic_test_double.hpp"
#include "core/cli/progress.hpp"
#include "core/cli/query_command.hpp"
#include "core/report/experiment_report.hpp"
#include "core/cli/status_command.hpp"
#include "core/ga/factory.hpp"
#include "core/search/heldout.hpp"
#include "core/search/racing.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Genome = one uniform RoPE scale from {1.0, 1.1, ..., 2.0}; draws repeat, so
// the cache gets hits. Two candidates per generation, three generations.
class FixtureStrategy : public Strategy {
 public:
  explicit FixtureStrategy(std::uint64_t seed) : rng_(seed) {}
  std::vector<Candidate> ask() override {
    if (pending_.empty() && !done()) {
      std::uniform_int_distribution<int> pick(0, 10);
      for (int i = 0; i < 2; ++i) pending_.push_back({{1.0 + 0.1 * pick(rng_)}, Origin::random, {}, next_id_++});
    }
    return pending_;
  }
  void tell(const std::vector<double>& fitness) override {
    ASSERT_EQ(fitness.size(), pending_.size());
    for (const auto& c : pending_) population_.push_back(c.id);
    pending_.clear();
    ++generation_;
  }
  bool done() const override { return generation_ >= 3; }
  int generation() const override { return generation_; }
  std::vector<std::int64_t> population() const override { return population_; }
  json save_state() const override {
    std::ostringstream rng;
    rng << rng_;
    return {{"rng", rng.str()}, {"generation", generation_}, {"next_id", next_id_}, {"population", population_}};
  }
  void load_state(const json& state) override {
    std::istringstream rng(state.at("rng").get<std::string>());
    rng >> rng_;
    generation_ = state.at("generation");
    next_id_ = state.at("next_id");
    population_ = state.at("population").get<std::vector<std::int64_t>>();
    pending_.clear();
  }

 private:
  std::mt19937_64 rng_;
  std::vector<Candidate> pending_;
  std::vector<std::int64_t> population_;
  int generation_ = 0;
  std::int64_t next_id_ = 0;
};

class UniformScale : public Objective {
 public:
  explicit UniformScale(double step = 0.1) : space_{{FloatGene{"scale", 1.0, 2.0, step}}} {}
  std::string name() const override { return "fixture"; }
  const GenomeSpace& space() const override { return space_; }
  Intervention decode(const Genome& g) const override {
    Intervention iv;
    iv.rope_scale = {{g.at(0)}};
    return iv;
  }
  double fitness(const std::vector<metrics::PositionAccuracy>& s) const override {
    return metrics::bucket_fitness(s, {});
  }

 private:
  GenomeSpace space_;
};

// Two genes: one RoPE scale for the lower two of the synthetic model's four
// layers, one for the upper two, so crossover children mix their parents.
class TwoScales : public Objective {
 public:
  std::string name() const override { return "fixture-two"; }
  const GenomeSpace& space() const override { return space_; }
  Intervention decode(const Genome& g) const override {
    Intervention iv;
    iv.rope_scale = {{g.at(0)}, {g.at(0)}, {g.at(1)}, {g.at(1)}};
    return iv;
  }
  double fitness(const std::vector<metrics::PositionAccuracy>& s) const override {
    return metrics::bucket_fitness(s, {});
  }

 private:
  GenomeSpace space_{{FloatGene{"lower", 1.0, 2.0, 0.01}, FloatGene{"upper", 1.0, 2.0, 0.01}}};
};

// Fails (as a crashed model would) once it has run `budget` evaluations.
class FailingAfter : public SyntheticTestDoubleBackend {
 public:
  FailingAfter(int budget) : SyntheticTestDoubleBackend({.layers = 4, .heads = 2, .seed = 5}), budget_(budget) {}
  std::vector<SampleOutput> run(const Intervention& iv, const std::vector<BatchItem>& b, const RunOptions& o) override {
    if (budget_-- <= 0) throw BackendError("simulated crash");
    ++runs;
    return SyntheticTestDoubleBackend::run(iv, b, o);
  }
  int runs = 0;

 private:
  int budget_;
};

class RunLoopTest : public testing::TempDirTest {
 protected:

  SearchInputs inputs(Backend& backend, const std::string& name = "fixture-exp") {
    SearchInputs in;
    in.experiment_name = name;
    in.config_text = "name: " + name + "\n";
    in.search_config = {{"seed", 11}, {"search", {{"generations", 3}}}};
    in.backend = &backend;
    in.objective = &objective_;
    in.make_strategy = [] { return std::make_unique<FixtureStrategy>(11); };
    in.gold_positions = {0.0, 0.5, 1.0};
    for (size_t k = 0; k < in.gold_positions.size(); ++k)
      for (int i = 0; i < 10; ++i) {
        const double p = in.gold_positions[k];
        in.items.push_back({"p" + std::to_string(p) + "-" + std::to_string(i), "prompt", {}, "gold" + std::to_string(i), p});
        in.position_index.push_back(k);
      }
    in.dataset_slice = {{"fixture", 1}};
    in.metric = "teacher_forced";
    in.run_options.mode = Mode::teacher_forced;
    in.score = [](std::size_t, const SampleOutput& o) { return o.gold_emitted_first; };
    in.planned_generations = 3;
    return in;
  }

  json individuals(Store& store, std::int64_t experiment_id) {
    json out = json::array();
    for (const auto& i : store.individuals(experiment_id))
      out.push_back({i.candidate_id, i.generation, i.genome, i.fitness, i.origin});
    return out;
  }

  std::string db(const std::string& file = "results.db") const { return path(file); }

  // Restarts the search with a backend that crashes after one evaluation, as
  // a process killed and started again would, until the search completes.
  template <class MakeInputs>
  void run_crashing_after_each_evaluation(Store& store, MakeInputs make_inputs) {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      FailingAfter backend(1);
      try {
        run_search(store, make_inputs(backend), quiet_);
        return;
      } catch (const BackendError&) {
      }
    }
    FAIL() << "the search did not complete in 1000 restarts";
  }
  UniformScale objective_;
  std::ostringstream log_;
  cli::Progress quiet_{log_, cli::Progress::Style::quiet};
};

TEST_F(RunLoopTest, RunsToCompletionAndCachesRepeatedInterventions) {
  Store store(db());
  FailingAfter backend(1000);
  const RunSummary s = run_search(store, inputs(backend), quiet_);
  EXPECT_EQ(s.generations_done, 3);
  EXPECT_EQ(s.evaluated + s.cache_hits, 6);
  EXPECT_EQ(backend.runs, s.evaluated);
  auto rows = store.individuals(s.experiment_id);
  ASSERT_EQ(rows.size(), 6u);
  std::set<std::string> distinct;
  for (const auto& r : rows) distinct.insert(r.genome.dump());
  EXPECT_EQ(static_cast<size_t>(s.evaluated), distinct.size()) << "each distinct genome is evaluated exactly once";
  EXPECT_EQ(store.generations(s.experiment_id).size(), 3u);
  EXPECT_EQ(store.totals().sample_results, 30 * s.evaluated);

  // Running again is a no-op: the experiment is complete.
  const RunSummary again = run_search(store, inputs(backend), quiet_);
  EXPECT_TRUE(again.already_complete);
  EXPECT_EQ(again.evaluated, 0);
  EXPECT_EQ(again.best_fitness, s.best_fitness);

  // A second experiment in the same database on the same data reuses every evaluation.
  FailingAfter fresh(1000);
  const RunSummary other = run_search(store, inputs(fresh, "second"), quiet_);
  EXPECT_EQ(other.evaluated, 0);
  EXPECT_EQ(other.cache_hits, 6);
  EXPECT_EQ(individuals(store, other.experiment_id).size(), 6u);
}

TEST_F(RunLoopTest, ResumeAfterFailureMatchesAnUninterruptedRun) {
  json reference;
  {
    Store store(db("reference.db"));
    FailingAfter backend(1000);
    reference = individuals(store, run_search(store, inputs(backend), quiet_).experiment_id);
  }
  Store store(db());
  run_crashing_after_each_evaluation(store, [&](Backend& backend) { return inputs(backend); });
  const auto experiment = store.find_experiment("fixture-exp");
  ASSERT_TRUE(experiment);
  EXPECT_EQ(individuals(store, experiment->id), reference);
  EXPECT_EQ(store.totals().evaluations_failed, 0) << "failed rows are replaced by the successful retry";
}

TEST_F(RunLoopTest, EditedSearchIsRefusedNamingTheChange) {
  Store store(db());
  FailingAfter backend(1000);
  run_search(store, inputs(backend), quiet_);
  SearchInputs edited = inputs(backend);
  edited.search_config["search"]["generations"] = 5;
  try {
    run_search(store, edited, quiet_);
    FAIL() << "expected ResumeRefused";
  } catch (const ResumeRefused& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("search.generations: 3 -> 5"), std::string::npos) << what;
    EXPECT_NE(what.find("--new-experiment"), std::string::npos) << what;
  }
}

// The ga strategy on a 101-value scale with gaussian mutants (which collide
// often): unique children make every individual a new evaluation, and the
// memory rebuilt from the store after each crash resumes exactly.
TEST_F(RunLoopTest, UniqueChildrenEvaluateOnlyNewInterventionsAndResumeExactly) {
  UniformScale fine(0.01);
  const auto ga_inputs = [&](Backend& backend, bool unique) {
    SearchInputs in = inputs(backend);
    in.objective = &fine;
    in.unique_children = unique;
    json config = {{"kind", "ga"},      {"init", "random"}, {"population_size", 6}, {"parents", 2},
                   {"generations", 3},  {"mutants", 4},     {"crossovers", 0},
                   {"mutation", {{"kind", "gaussian"}, {"sigma", 0.02}}}};
    if (unique) config["unique_children"] = true;
    const GenomeSpace* space = &fine.space();
    in.make_strategy = [space, config] { return make_strategy(*space, config, 12); };
    return in;
  };
  const auto distinct_genomes = [](const json& rows) {
    std::set<std::string> distinct;
    for (const auto& row : rows) distinct.insert(row[2].dump());
    return distinct.size();
  };
  json plain, reference;
  {
    Store store(db("plain.db"));
    FailingAfter backend(1000);
    const RunSummary s = run_search(store, ga_inputs(backend, false), quiet_);
    plain = individuals(store, s.experiment_id);
    EXPECT_GT(s.cache_hits, 0) << "this seed re-proposes without the option";
  }
  {
    Store store(db("reference.db"));
    FailingAfter backend(1000);
    const RunSummary s = run_search(store, ga_inputs(backend, true), quiet_);
    reference = individuals(store, s.experiment_id);
    EXPECT_EQ(s.cache_hits, 0);
    EXPECT_EQ(s.evaluated, 6 + 3 * 4) << "each generation evaluates its configured number of new candidates";
  }
  ASSERT_EQ(reference.size(), plain.size());
  EXPECT_EQ(distinct_genomes(reference), reference.size());
  EXPECT_LT(distinct_genomes(plain), plain.size());

  Store store(db());
  run_crashing_after_each_evaluation(store, [&](Backend& backend) { return ga_inputs(backend, true); });
  const auto experiment = store.find_experiment("fixture-exp");
  ASSERT_TRUE(experiment);
  EXPECT_EQ(individuals(store, experiment->id), reference);
}

// Racing on the ga strategy: wide gaussian mutants of a 101-value scale
// (many far from the synthetic optimum) race for the 3 parent places on
// slices of 3, 5, 7, 9 then 10 units (3 positions each).
class RacingRunTest : public RunLoopTest {
 protected:
  SearchInputs racing_inputs(Backend& backend, bool racing, int patience = 0, int crossovers = 0) {
    SearchInputs in = inputs(backend);
    in.objective = crossovers > 0 ? static_cast<const Objective*>(&two_) : &fine_;
    for (std::size_t i = 0; i < in.items.size(); ++i) in.race_keys.push_back("base-" + std::to_string(i % 10));
    if (racing) in.racing = RaceSettings{3, 2, 0.9};
    json config = {{"kind", "ga"},     {"init", "random"}, {"population_size", 8}, {"parents", 3},
                   {"generations", 5}, {"mutants", 5},     {"crossovers", crossovers},
                   {"mutation", {{"kind", "gaussian"}, {"sigma", 0.35}}}};
    if (patience > 0) config["patience"] = patience;
    const GenomeSpace* space = &in.objective->space();
    in.make_strategy = [space, config] { return make_strategy(*space, config, 21); };
    return in;
  }
  // What an uninterrupted racing run on a healthy backend stores
  // (reference.db): the raced individuals, the checkpoints, the prompts run.
  struct RacingReference {
    json individuals, generations;
    double prompts = 0;
  };
  RacingReference uninterrupted_racing_run() {
    Store store(db("reference.db"));
    FailingAfter backend(100000);
    const RunSummary s = run_search(store, racing_inputs(backend, true), quiet_);
    EXPECT_GT(s.raced, 0);
    return {raced_individuals(store, s.experiment_id), checkpoints(store, s.experiment_id),
            store.experiment_statuses().front().prompts};
  }
  // Every stored fact of an individual, cache hit and raced sample count included.
  json raced_individuals(Store& store, std::int64_t experiment_id) {
    json out = json::array();
    for (const auto& i : store.individuals(experiment_id))
      out.push_back({i.candidate_id, i.generation, i.genome, i.fitness, i.origin, i.parents, i.cache_hit,
                     i.raced_samples ? json(*i.raced_samples) : json(nullptr)});
    return out;
  }
  json checkpoints(Store& store, std::int64_t experiment_id) {
    json out = json::array();
    for (const auto& g : store.generations(experiment_id))
      out.push_back({g.generation, g.population, g.strategy_state, g.best_fitness.value_or(-1.0)});
    return out;
  }
  UniformScale fine_{0.01};
  TwoScales two_;
};

TEST_F(RacingRunTest, DropsChildrenAndKeepsEveryParentsFitnessExact) {
  Store store(db());
  FailingAfter backend(100000);
  const RunSummary s = run_search(store, racing_inputs(backend, true), quiet_);
  EXPECT_GT(s.raced, 0) << "wide mutants lose to the parents";
  std::set<std::int64_t> parents;
  const auto all = store.individuals(s.experiment_id);
  for (const IndividualRecord& i : all)
    for (const json& p : i.parents) parents.insert(p.get<std::int64_t>());
  int raced = 0, raced_first = 0, whole_first = 0;
  for (const IndividualRecord& i : all) {
    const auto evaluation = store.evaluation(i.evaluation_id);
    ASSERT_TRUE(evaluation);
    if (i.generation == 0) (i.raced_samples ? raced_first : whole_first) += 1;
    if (i.raced_samples) {
      ++raced;
      EXPECT_EQ(*i.raced_samples % 3, 0) << "a slice covers every position evenly";
      EXPECT_TRUE(*i.raced_samples == 9 || *i.raced_samples == 15 || *i.raced_samples == 21 || *i.raced_samples == 27)
          << "slices of 3, 5, 7, 9 units: " << *i.raced_samples;
      EXPECT_EQ(parents.count(i.candidate_id), 0u) << "a dropped candidate is never a parent";
      continue;
    }
    // Whole split, exact: the stored fitness is the complete evaluation's.
    EXPECT_TRUE(evaluation->complete);
    EXPECT_EQ(store.evaluation_samples(i.evaluation_id).size(), 30u);
    EXPECT_DOUBLE_EQ(i.fitness, fine_.fitness(position_tallies(evaluation->position_scores)));
  }
  EXPECT_EQ(raced, s.raced);
  EXPECT_GT(raced_first, 0) << "random initial members lose to the best 3 of their population";
  EXPECT_GE(whole_first, 3) << "the 3 parents the first population keeps are scored on the whole split";
  // The report's generation table counts them per generation.
  std::int64_t raced_in_summaries = 0;
  for (const GenerationSummary& g : store.generation_summaries(s.experiment_id)) raced_in_summaries += g.raced;
  EXPECT_EQ(raced_in_summaries, s.raced);

  // A partial row is never served as a whole evaluation; evaluating its
  // intervention on the split runs only the missing samples and completes it.
  const auto dropped = std::find_if(all.begin(), all.end(), [&](const IndividualRecord& i) {
    return i.raced_samples && !store.evaluation(i.evaluation_id)->complete;
  });
  ASSERT_NE(dropped, all.end());
  const auto partial = store.evaluation(dropped->evaluation_id);
  EXPECT_FALSE(store.find_evaluation(partial->cache_key));
  const std::size_t stored = store.evaluation_samples(partial->id).size();
  SearchInputs plain = racing_inputs(backend, false);
  const int runs_before = backend.runs;
  const SplitEvaluation completed =
      evaluate_on_split(store, plain, Intervention::from_json(json::parse(partial->intervention)));
  EXPECT_EQ(completed.evaluation_id, partial->id);
  const std::size_t slice = EvaluationInputs{}.stored_slice_items;
  EXPECT_EQ(backend.runs, runs_before + static_cast<int>((30 - stored + slice - 1) / slice))
      << "only the missing samples run, in stored slices";
  EXPECT_EQ(completed.resumed_samples, stored);
  EXPECT_EQ(store.evaluation_samples(partial->id).size(), 30u);
  EXPECT_GT(30u, stored);
  Store fresh_store(db("fresh.db"));
  FailingAfter fresh_backend(1000);
  SearchInputs fresh_inputs = racing_inputs(fresh_backend, false);
  const SplitEvaluation from_scratch =
      evaluate_on_split(fresh_store, fresh_inputs, Intervention::from_json(json::parse(partial->intervention)));
  EXPECT_EQ(completed.scores, from_scratch.scores) << "completed from stored samples = evaluated at once";

  // Status: passes saved by racing beside those saved by the cache.
  const auto status = store.experiment_statuses().front();
  EXPECT_EQ(status.raced, s.raced);
  EXPECT_EQ(status.split_samples, 30);
  EXPECT_GT(status.saved_by_racing, 0);
  EXPECT_GE(status.individuals * 30 - static_cast<std::int64_t>(status.prompts) - status.saved_by_racing, 0);
  std::ostringstream out, err;
  EXPECT_EQ(cli::print_status(db(), out, err), 0) << err.str();
  EXPECT_NE(out.str().find("passes saved by racing"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("| " + std::to_string(status.saved_by_racing) + " "), std::string::npos) << out.str();
}

TEST_F(RacingRunTest, RunsFewerPromptsThanTheSameSearchWithoutRacing) {
  std::int64_t raced_prompts = 0, plain_prompts = 0;
  {
    Store store(db("raced.db"));
    FailingAfter backend(100000);
    run_search(store, racing_inputs(backend, true), quiet_);
    raced_prompts = static_cast<std::int64_t>(store.experiment_statuses().front().prompts);
  }
  {
    Store store(db("plain.db"));
    FailingAfter backend(100000);
    const RunSummary s = run_search(store, racing_inputs(backend, false), quiet_);
    EXPECT_EQ(s.raced, 0);
    const auto status = store.experiment_statuses().front();
    plain_prompts = static_cast<std::int64_t>(status.prompts);
    EXPECT_EQ(status.saved_by_racing, 0);
    EXPECT_EQ(status.raced, 0);
  }
  EXPECT_LT(raced_prompts, plain_prompts);
}

// A backend with workers that keeps speculative results as the MPI
// dispatcher does: it runs every speculative job it is given except every
// third (as if still out when asked for; then the job runs it itself), keeps
// the results by intervention and items, hands a later job with the same
// intervention and items the kept result, and throws away what the next
// call neither asks for nor lists again.
class SpeculatingBackend : public FailingAfter {
 public:
  SpeculatingBackend() : FailingAfter(100000) {}
  void run_each(const std::vector<RunJob>& jobs, const RunOptions& options, const RunJobDone& done,
                const std::atomic<int>*) override {
    std::map<std::string, std::vector<SampleOutput>> kept;
    for (const RunJob& job : jobs) {
      const auto found = kept_.find(key(job));
      if (found == kept_.end()) continue;
      if (!job.speculative) {
        ++used;
        continue;  // taken below
      }
      kept.insert(*found);
      kept_.erase(found);
    }
    for (std::size_t j = 0; j < jobs.size() && !jobs[j].speculative; ++j) {
      const auto found = kept_.find(key(jobs[j]));
      if (found != kept_.end()) {
        done(j, {found->second, nullptr, 0.0});
        kept_.erase(found);
      } else {
        done(j, {run(*jobs[j].intervention, *jobs[j].batch, options), nullptr, 0.0});
      }
    }
    discarded += static_cast<int>(kept_.size());
    kept_ = std::move(kept);
    for (const RunJob& job : jobs) {
      if (!job.speculative || kept_.count(key(job)) > 0 || speculated++ % 3 == 2) continue;
      kept_.emplace(key(job), run(*job.intervention, *job.batch, options));
    }
  }
  nlohmann::json workers() const override { return {{"seconds", 1.0}, {"ranks", json::array()}}; }
  int speculated = 0;
  int used = 0;
  int discarded = 0;

 private:
  static std::string key(const RunJob& job) {
    std::string k = job.intervention->to_json().dump();
    for (const BatchItem& item : *job.batch) k += "\n" + item.id;
    return k;
  }
  std::map<std::string, std::vector<SampleOutput>> kept_;
};

// Racing on a backend that runs the next step speculatively stores exactly
// the rows, checkpoints and prompts of one that does not: the search plans
// each entrant's next step as the run that step plans if the look keeps it
// (some are used), and dropped candidates' runs are never stored (some are
// thrown away).
TEST_F(RacingRunTest, SpeculativeNextStepsLeaveTheRowsUnchanged) {
  const RacingReference reference = uninterrupted_racing_run();
  ASSERT_FALSE(HasFailure());
  Store store(db());
  SpeculatingBackend backend;
  const RunSummary s = run_search(store, racing_inputs(backend, true), quiet_);
  EXPECT_EQ(raced_individuals(store, s.experiment_id), reference.individuals);
  EXPECT_EQ(checkpoints(store, s.experiment_id), reference.generations);
  EXPECT_EQ(store.experiment_statuses().front().prompts, reference.prompts);
  EXPECT_GT(backend.speculated, 0);
  EXPECT_GT(backend.used, 0) << "the next step's runs are the speculated ones";
  EXPECT_GT(backend.discarded, 0) << "dropped children's next steps";
}

// A backend that crashes after every slice, restarted until the search
// completes, ends with the uninterrupted run's individuals (raced sample
// counts included), checkpoints and committed work.
TEST_F(RacingRunTest, ResumeAfterEverySliceMatchesAnUninterruptedRun) {
  const RacingReference reference = uninterrupted_racing_run();
  ASSERT_FALSE(HasFailure());
  Store store(db());
  run_crashing_after_each_evaluation(store, [&](Backend& backend) { return racing_inputs(backend, true); });
  const auto experiment = store.find_experiment("fixture-exp");
  ASSERT_TRUE(experiment);
  EXPECT_EQ(raced_individuals(store, experiment->id), reference.individuals);
  EXPECT_EQ(checkpoints(store, experiment->id), reference.generations);
  EXPECT_EQ(store.experiment_statuses().front().prompts, reference.prompts)
      << "only the slice in flight at each crash was lost and redone";
  EXPECT_EQ(store.totals().evaluations_failed, 0);
}

// Crossover pairs (the fitter child alone is kept) race as siblings: a
// child is dropped as soon as its sibling is better, and a run crashing
// after every slice ends as the uninterrupted one.
TEST_F(RacingRunTest, CrossoverSiblingsRaceAndResumeExactly) {
  json reference;
  {
    Store store(db("reference.db"));
    FailingAfter backend(100000);
    const RunSummary s = run_search(store, racing_inputs(backend, true, 0, 2), quiet_);
    reference = raced_individuals(store, s.experiment_id);
    int raced_crossovers = 0, crossovers = 0;
    for (const IndividualRecord& i : store.individuals(s.experiment_id)) {
      if (i.origin != "crossover") continue;
      ++crossovers;
      raced_crossovers += i.raced_samples.has_value();
    }
    ASSERT_GT(crossovers, 0) << "this fixture makes crossover pairs";
    EXPECT_GT(raced_crossovers, 0);
  }
  Store store(db());
  run_crashing_after_each_evaluation(store, [&](Backend& backend) { return racing_inputs(backend, true, 0, 2); });
  const auto experiment = store.find_experiment("fixture-exp");
  ASSERT_TRUE(experiment);
  EXPECT_EQ(raced_individuals(store, experiment->id), reference);
}

// ga.patience with racing: the search stops once a generation brings no new
// best, before its configured end, and a run crashing after every slice
// stops at the same generation with the same individuals.
TEST_F(RacingRunTest, PatienceStopsAStalledRunAndResumesExactly) {
  json reference, reference_generations;
  int generations_done = 0;
  {
    Store store(db("reference.db"));
    FailingAfter backend(100000);
    const RunSummary s = run_search(store, racing_inputs(backend, true, 1), quiet_);
    generations_done = s.generations_done;
    reference = raced_individuals(store, s.experiment_id);
    reference_generations = checkpoints(store, s.experiment_id);
    // The same search without patience runs all 6 generations, and the
    // stopped one is its prefix.
    Store full_store(db("full.db"));
    FailingAfter full_backend(100000);
    const RunSummary full = run_search(full_store, racing_inputs(full_backend, true), quiet_);
    EXPECT_EQ(full.generations_done, 6);
    ASSERT_LT(generations_done, 6) << "this fixture stalls before its last generation";
    const json full_individuals = raced_individuals(full_store, full.experiment_id);
    ASSERT_GT(full_individuals.size(), reference.size());
    for (std::size_t i = 0; i < reference.size(); ++i) EXPECT_EQ(reference[i], full_individuals[i]) << i;
    const auto generations = store.generations(s.experiment_id);
    ASSERT_GE(generations.size(), 2u);
    EXPECT_EQ(generations.back().best_fitness, generations[generations.size() - 2].best_fitness)
        << "the last generation brought no new best";
  }
  Store store(db());
  run_crashing_after_each_evaluation(store, [&](Backend& backend) { return racing_inputs(backend, true, 1); });
  const auto experiment = store.find_experiment("fixture-exp");
  ASSERT_TRUE(experiment);
  EXPECT_EQ(raced_individuals(store, experiment->id), reference);
  EXPECT_EQ(checkpoints(store, experiment->id), reference_generations);
  EXPECT_EQ(static_cast<int>(store.generations(experiment->id).size()), generations_done);
}

// objective.fitness gold_logprob: every stored fitness is the λ-weighted
// (0.2, 0.3, 0.5) mean gold log-probability of the stored samples, from the
// cache as from the backend; accuracy stays the objective's own fitness.
TEST_F(RunLoopTest, GoldLogprobFitnessWeighsTheStoredSamples) {
  Store store(db());
  FailingAfter backend(1000);
  SearchInputs in = inputs(backend);
  in.scoring.fitness = FitnessKind::gold_logprob;
  const RunSummary s = run_search(store, in, quiet_);
  // A second experiment on the same data takes every evaluation from the cache.
  SearchInputs cached = inputs(backend, "second");
  cached.scoring.fitness = FitnessKind::gold_logprob;
  const RunSummary second = run_search(store, cached, quiet_);
  ASSERT_EQ(second.cache_hits, 6);
  std::vector<IndividualRecord> all = store.individuals(s.experiment_id);
  for (const IndividualRecord& i : store.individuals(second.experiment_id)) all.push_back(i);
  for (const IndividualRecord& individual : all) {
    std::map<double, std::pair<double, int>> by_position;
    for (const SampleRecord& sample : store.evaluation_samples(individual.evaluation_id)) {
      ASSERT_TRUE(sample.gold_logprob.has_value());
      by_position[sample.gold_position].first += *sample.gold_logprob;
      ++by_position[sample.gold_position].second;
    }
    ASSERT_EQ(by_position.size(), 3u);
    const auto mean = [&](double p) { return by_position[p].first / by_position[p].second; };
    EXPECT_NEAR(individual.fitness, 0.2 * mean(0.0) + 0.3 * mean(0.5) + 0.5 * mean(1.0), 1e-12);
    EXPECT_LT(individual.fitness, 0.0);
  }
}

// nsga2 through the run loop: two objectives per candidate, recomputed from
// the stored evaluation on resume, so a run that crashes after every
// evaluation ends with the same individuals and the same front.
TEST_F(RunLoopTest, Nsga2ResumeAfterFailureMatchesAnUninterruptedRun) {
  UniformScale fine(0.01);
  const auto nsga2_inputs = [&](Backend& backend) {
    SearchInputs in = inputs(backend);
    in.objective = &fine;
    in.unique_children = true;
    in.scoring.objectives = {"accuracy_beginning", "logprob_end"};
    const json config = {{"kind", "nsga2"},       {"population_size", 5},
                         {"generations", 3},      {"objectives", 2},
                         {"unique_children", true}, {"mutation", {{"kind", "gaussian"}, {"sigma", 0.05}}}};
    const GenomeSpace* space = &fine.space();
    in.make_strategy = [space, config] { return make_strategy(*space, config, 13); };
    return in;
  };
  const auto front_ids = [](Store& store, std::int64_t experiment) {
    std::vector<std::int64_t> ids;
    for (const FrontMember& m : pareto_front(store, experiment)) ids.push_back(m.candidate_id);
    return ids;
  };
  json reference;
  std::vector<std::int64_t> reference_front;
  {
    Store store(db("reference.db"));
    FailingAfter backend(1000);
    const RunSummary s = run_search(store, nsga2_inputs(backend), quiet_);
    EXPECT_EQ(s.generations_done, 4);
    reference = individuals(store, s.experiment_id);
    EXPECT_EQ(reference.size(), 5u * 4u);
    reference_front = front_ids(store, s.experiment_id);
    EXPECT_FALSE(reference_front.empty());
    for (const FrontMember& m : pareto_front(store, s.experiment_id)) EXPECT_EQ(m.objectives.size(), 2u);
  }
  Store store(db());
  run_crashing_after_each_evaluation(store, [&](Backend& backend) { return nsga2_inputs(backend); });
  const auto experiment = store.find_experiment("fixture-exp");
  ASSERT_TRUE(experiment);
  EXPECT_EQ(individuals(store, experiment->id), reference);
  EXPECT_EQ(front_ids(store, experiment->id), reference_front);
}

// A server's model is known only at run time: resuming against another one
// must not mix its evaluations into the population.
TEST_F(RunLoopTest, ResumeAgainstAnotherModelIsRefused) {
  Store store(db());
  FailingAfter interrupted(2);
  EXPECT_THROW(run_search(store, inputs(interrupted), quiet_), BackendError);
  SyntheticTestDoubleBackend other({.layers = 6, .heads = 2, .seed = 5});
  try {
    run_search(store, inputs(other), quiet_);
    FAIL() << "expected ResumeRefused";
  } catch (const ResumeRefused& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(interrupted.identity().key()), std::string::npos) << what;
    EXPECT_NE(what.find(other.identity().key()), std::string::npos) << what;
  }
  FailingAfter same(1000);
  EXPECT_GT(run_search(store, inputs(same), quiet_).generations_done, 0) << "the same model resumes";
}

// The read-side commands on a database the loop wrote (in-process, so they
// also run under the sanitizers; the subprocess tests cover exit codes).
TEST_F(RunLoopTest, StatusReportAndQueryReadTheDatabase) {
  {
    Store store(db());
    FailingAfter backend(1000);
    run_search(store, inputs(backend), quiet_);
  }
  std::ostringstream out, err;
  EXPECT_EQ(cli::print_status(db(), out, err), 0) << err.str();
  EXPECT_NE(out.str().find("| fixture-exp "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("complete"), std::string::npos) << out.str();

  const nlohmann::json report = report::build_report(db(), "fixture-exp");
  EXPECT_EQ(report["generations"].size(), 3u);
  EXPECT_EQ(report["best"]["layer_scales"].size(), 1u) << "one uniform scale";
  EXPECT_EQ(report["best"]["position_scores"].size(), 3u);
  for (const char* format : {"md", "json", "csv"}) {
    std::ostringstream text;
    EXPECT_EQ(report::print_report(db(), "", format, text, err), 0) << format << err.str();
    EXPECT_FALSE(text.str().empty());
  }
  EXPECT_EQ(report::print_report(db(), "", "xml", out, err), 2);
  EXPECT_EQ(report::print_report(db(), "missing", "md", out, err), 1);

  std::ostringstream rows;
  EXPECT_EQ(cli::run_query(db(), "SELECT count(*) AS n FROM individuals", rows, err), 0);
  EXPECT_NE(rows.str().find("| 6 "), std::string::npos) << rows.str();
  EXPECT_EQ(cli::run_query(db(), "DELETE FROM individuals", rows, err), 1);
  EXPECT_EQ(cli::run_query(db(), "SELEC nonsense", rows, err), 1);
  std::ostringstream after;
  cli::run_query(db(), "SELECT count(*) AS n FROM individuals", after, err);
  EXPECT_NE(after.str().find("| 6 "), std::string::npos) << after.str();
}

TEST(CacheKey, DependsOnEveryPart) {
  Intervention a, b;
  a.rope_scale = {{1.5}};
  b.rope_scale = {{1.5000000000001}};  // same after canonical rounding
  ModelIdentity m;
  m.name = "m";
  const json slice = {{"n", 1}};
  EXPECT_EQ(evaluation_cache_key(a, slice, "tf", m), evaluation_cache_key(b, slice, "tf", m));
  Intervention c;
  c.rope_scale = {{1.6}};
  EXPECT_NE(evaluation_cache_key(a, slice, "tf", m), evaluation_cache_key(c, slice, "tf", m));
  EXPECT_NE(evaluation_cache_key(a, slice, "tf", m), evaluation_cache_key(a, {{"n", 2}}, "tf", m));
  EXPECT_NE(evaluation_cache_key(a, slice, "tf", m), evaluation_cache_key(a, slice, "generate", m));
  ModelIdentity other = m;
  other.layers = 3;
  EXPECT_NE(evaluation_cache_key(a, slice, "tf", m), evaluation_cache_key(a, slice, "tf", other));
}

}  // namespace
}  // namespace midtune
