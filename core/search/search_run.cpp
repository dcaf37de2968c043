#include "core/search/search_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "core/experiment/experiment.hpp"

namespace midtune {

using nlohmann::json;

namespace {

json genome_json(const Genome& genome) { return json(genome); }

// A genome is known when its decoded intervention has the cache key of one
// this experiment evaluated in an earlier generation, or of one already
// proposed into the batch. Built from the stored individuals of earlier
// generations only, so a resumed run (which may hold part of the current
// generation) rebuilds exactly the memory the uninterrupted run had.
class ExperimentMemory final : public ProposalMemory {
 public:
  ExperimentMemory(const Objective& objective, const Evaluator& evaluator) : objective_(objective), evaluator_(evaluator) {}
  bool known(const Genome& genome) const override { return keys_.count(key(genome)) > 0; }
  void remember(const Genome& genome) override { keys_.insert(key(genome)); }

 private:
  std::string key(const Genome& genome) const { return evaluator_.cache_key(objective_.decode(genome)); }
  const Objective& objective_;
  const Evaluator& evaluator_;
  std::set<std::string> keys_;
};

class SearchRun {
 public:
  SearchRun(Store& store, const SearchInputs& inputs, SearchProgress& progress)
      : store_(store), in_(inputs), progress_(progress), evaluator_(inputs) {
    if (in_.racing) {
      units_ = race_units(in_.position_index, in_.gold_positions.size(), in_.race_keys);
      schedule_ = race_schedule(*in_.racing, units_.size());
      looks_ = race_looks(schedule_, units_.size());
      weights_ = position_weights(in_.scoring.weights, in_.gold_positions.size());
      // A backend computing in this process (no workers) would skip
      // speculative runs: do not build them.
      speculate_ = !in_.backend->workers().is_null();
    }
  }

  RunSummary run() {
    const ExperimentRecord experiment = open_experiment();
    summary_.experiment_id = experiment.id;
    const std::vector<RunProvenance> earlier = store_.run_provenances(experiment.id);
    run_id_ = store_.start_run(experiment.id, in_.provenance);
    warn_if_computed_elsewhere(earlier);
    std::unique_ptr<Strategy> strategy = in_.make_strategy();
    if (auto checkpoint = store_.latest_generation(experiment.id)) {
      strategy->load_state(checkpoint->strategy_state);
      progress_.message("resuming '" + in_.experiment_name + "' after generation " +
                        std::to_string(checkpoint->generation + 1) + " from " + store_.path());
    }
    summary_.already_complete = strategy->done();
    while (!strategy->done()) {
      stop_if_asked();
      const int generation = strategy->generation();
      std::optional<ExperimentMemory> memory;
      if (in_.unique_children) {
        memory.emplace(*in_.objective, evaluator_);
        for (const IndividualRecord& stored : store_.individuals(experiment.id))
          if (stored.generation < generation) memory->remember(stored.genome.get<Genome>());
        strategy->set_proposal_memory(&*memory);
      }
      const std::vector<Candidate> batch = strategy->ask();
      strategy->set_proposal_memory(nullptr);
      // Re-estimated every batch: a GA asks fewer candidates after the
      // initial population (parents are carried, not re-evaluated).
      progress_.set_total(done_candidates_ +
                          static_cast<int>(batch.size()) * std::max(1, generation_total(*strategy) - generation));
      const std::optional<RaceField> field = in_.racing ? strategy->race_field() : std::nullopt;
      std::vector<Outcome> outcomes;
      if (field) {
        outcomes = race_batch(experiment.id, generation, batch, *field);
      } else {
        outcomes = evaluate_batch(experiment.id, generation, batch);
      }
      std::vector<double> fitness;
      std::vector<std::vector<double>> objectives;
      int evaluated = 0, cached = 0;
      for (const Outcome& outcome : outcomes) {
        fitness.push_back(outcome.fitness);
        objectives.push_back(outcome.objectives);
        evaluated += outcome.fresh;
        cached += outcome.cache_hit;
      }
      if (strategy->objectives() > 1) {
        strategy->tell_objectives(objectives);
      } else {
        strategy->tell(fitness);
      }
      const auto [best, mean] = checkpoint(experiment.id, generation, *strategy, fitness);
      ++summary_.generations_done;
      progress_.generation_done(generation, generation_total(*strategy), best, mean, evaluated, cached);
    }
    if (const std::string reason = strategy->stop_reason(); !reason.empty() && summary_.generations_done > 0)
      progress_.message("stopped after generation " + std::to_string(strategy->generation()) + ": " + reason);
    progress_.finish();
    record_workers(true);
    store_.finish_run(run_id_);
    fill_best(experiment.id);
    return summary_;
  }

 private:
  // Between evaluations: the one in flight has been stored, nothing is half
  // written, and the same command resumes from here.
  void stop_if_asked() const {
    if (stop_requested(in_.stop_signal)) throw RunStopped("before the next evaluation");
  }

  ExperimentRecord open_experiment() {
    if (auto existing = store_.find_experiment(in_.experiment_name)) {
      const auto changes = search_differences(existing->search_config, in_.search_config);
      if (!changes.empty()) {
        std::string message = "experiment '" + in_.experiment_name + "' in " + store_.path() +
                              " was started with a different search; refusing to resume. Changed:";
        for (const std::string& c : changes) message += "\n  " + c;
        if (!existing->search_config.value("backend", json::object()).contains("identity"))
          message += "\nThis experiment was stored by a midtune that did not record the model's and the data's "
                     "contents, so its evaluations cannot be checked against these files.";
        message += "\nRevert the edit, or start a fresh experiment in the same database with --new-experiment NAME.";
        throw ResumeRefused(message);
      }
      refuse_other_model(*existing);
      return *existing;
    }
    ExperimentRecord record;
    record.name = in_.experiment_name;
    record.config_text = in_.config_text;
    record.config_hash = fnv1a_hex(in_.search_config.dump());
    record.search_config = in_.search_config;
    record.source_path = in_.source_path;
    return store_.create_experiment(record);
  }

  // A server backend's model is only known at run time (its /v1/info), and a
  // GGUF may be replaced under the same file name: evaluations of another
  // model must not join this experiment's population.
  void refuse_other_model(const ExperimentRecord& existing) {
    const std::string now = in_.backend->identity().key();
    if (const auto other = store_.other_model(existing.id, now)) {
      throw ResumeRefused("experiment '" + in_.experiment_name + "' in " + store_.path() + " was evaluated on " +
                          *other + "; the backend now serves " + now +
                          "; refusing to resume. Point the backend at the same model, or start a fresh "
                          "experiment in the same database with --new-experiment NAME.");
    }
  }

  // Rows are bit-identical only on one kernel path: a resume on another
  // (another machine, MIDTUNE_ISA, a requeue onto another node type) may
  // part from the earlier rows at near-tie decisions. Said once per run.
  void warn_if_computed_elsewhere(const std::vector<RunProvenance>& earlier) {
    const json now = in_.provenance.is_object() ? in_.provenance.value("execution", json::object()) : json::object();
    for (auto run = earlier.rbegin(); run != earlier.rend(); ++run) {
      if (!run->provenance.is_object()) continue;
      const json before = run->provenance.value("execution", json::object());
      std::string changed;
      for (const char* field : {"device", "kernel_path", "precision"})
        if (before.contains(field) && now.contains(field) && before[field] != now[field])
          changed += std::string(changed.empty() ? "" : ", ") + field + " " + before[field].get<std::string>() +
                     " -> " + now[field].get<std::string>();
      if (!changed.empty())
        progress_.warning("experiment '" + in_.experiment_name + "' was computed by run " +
                          std::to_string(run->run_id) + " on " + run->provenance.value("host", std::string("?")) +
                          " (" + run->provenance.value("cpu", std::string("?")) + "); this run differs: " + changed +
                          ". Decisions at near-ties may differ from the earlier rows; `ga-run report` marks "
                          "which generations each run computed.");
      return;  // the latest run with a record is the one to compare with
    }
  }

  // The generation count to show; strategies without one report the current.
  int generation_total(const Strategy& strategy) const {
    return in_.planned_generations > 0 ? in_.planned_generations : strategy.generation() + 1;
  }

  struct Outcome {
    double fitness;  // what the strategy is told: -infinity for a child racing dropped
    bool cache_hit;
    bool fresh;
    std::vector<double> objectives;  // nsga2's, empty for a scalar search
    bool raced = false;
  };

  // Progress and the best fitness so far, once a candidate's outcome is known.
  void candidate_done(const Outcome& outcome) {
    if (!outcome.raced) best_ = std::max(best_, outcome.fitness);
    progress_.candidate_done(++done_candidates_, outcome.cache_hit, best_);
    record_workers(false);
  }

  // How an MPI run's evaluator ranks are doing, for `ga-run status`: at
  // every checkpoint and the end, and between them at most every few
  // seconds (each record is a write to the results file).
  void record_workers(bool always) {
    const auto now = std::chrono::steady_clock::now();
    if (!always && now - workers_recorded_ < std::chrono::seconds(5)) return;
    json workers = in_.backend->workers();
    if (workers.is_null()) return;
    store_.record_workers(run_id_, workers);
    workers_recorded_ = now;
  }

  std::vector<const SampleRecord*> by_item(const std::vector<SampleRecord>& samples) const {
    std::vector<const SampleRecord*> out(in_.items.size(), nullptr);
    for (const SampleRecord& s : samples) out[evaluator_.item_index(s.sample_id)] = &s;
    return out;
  }

  // Per-position outcomes of a stored evaluation; the samples are read only
  // when a log-probability fitness or objective needs them.
  PositionOutcomes outcomes_of(std::int64_t evaluation_id, const std::vector<PositionScore>& scores) {
    return position_outcomes(scores, in_.scoring.needs_samples() ? store_.evaluation_samples(evaluation_id)
                                                                 : std::vector<SampleRecord>{});
  }

  std::vector<double> objectives_of(const PositionOutcomes& outcomes) const {
    return in_.scoring.objectives.empty() ? std::vector<double>{} : pareto_objectives(in_.scoring, outcomes);
  }

  // A candidate finished before the process stopped (resume), checked
  // against what the strategy proposes now.
  std::optional<IndividualRecord> stored_individual(std::int64_t experiment_id, const Candidate& candidate) {
    auto stored = store_.find_individual(experiment_id, candidate.id);
    if (!stored) return std::nullopt;
    if (stored->genome != genome_json(candidate.genome))
      throw std::runtime_error(store_.path() + ": candidate " + std::to_string(candidate.id) +
                               " was stored with genome " + stored->genome.dump() + " but the strategy now proposes " +
                               genome_json(candidate.genome).dump() + "; the checkpoint does not match this build");
    ++summary_.resumed_individuals;
    return stored;
  }

  // What the strategy is told for a stored individual: -infinity when racing
  // dropped it.
  static Outcome resumed_outcome(const IndividualRecord& stored, std::vector<double> objectives = {}) {
    if (stored.raced_samples) return {-INFINITY, false, false, std::move(objectives), true};
    return {stored.fitness, false, false, std::move(objectives)};
  }

  // The batch's candidates one after another, as fitness_of() scores them,
  // with the backend runs they need handed to the backend together
  // (Backend::run_each), so that evaluator ranks work on several candidates
  // at once. Each candidate is stored when its run and every earlier one
  // are done, so the rows and their order are those of a one-by-one
  // evaluation. No run is planned for a candidate that is stored, cached,
  // or a repeat of an earlier one in the batch (a cache hit by its turn);
  // nor from the first intervention the model refuses: that candidate and
  // those after it are scored one by one, and it fails as it would alone.
  std::vector<Outcome> evaluate_batch(std::int64_t experiment_id, int generation, const std::vector<Candidate>& batch) {
    std::vector<Intervention> interventions(batch.size());
    RunPlan plan;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (store_.find_individual(experiment_id, batch[i].id)) continue;
      interventions[i] = in_.objective->decode(batch[i].genome);
      const std::string key = evaluator_.cache_key(interventions[i]);
      if (!evaluator_.plan_run(plan, i, interventions[i], key, evaluator_.items_to_run(store_, key))) break;
    }
    std::vector<Outcome> outcomes;
    in_order(plan, batch.size(), [&](std::size_t i, const PrefetchedRun* ahead) {
      outcomes.push_back(fitness_of(experiment_id, generation, batch[i], ahead));
      candidate_done(outcomes.back());
    });
    return outcomes;
  }

  void in_order(const RunPlan& plan, std::size_t count,
                const std::function<void(std::size_t, const PrefetchedRun*)>& handle) {
    run_in_order(*in_.backend, in_.run_options, plan, count, handle, in_.stop_signal);
  }

  // `ahead`: the candidate's backend run, made ahead of its turn.
  Outcome fitness_of(std::int64_t experiment_id, int generation, const Candidate& candidate,
                     const PrefetchedRun* ahead = nullptr) {
    if (auto stored = stored_individual(experiment_id, candidate)) {
      std::vector<double> objectives;
      if (!in_.scoring.objectives.empty()) {  // recomputed from the stored evaluation, as first computed
        const auto evaluation = store_.evaluation(stored->evaluation_id);
        if (!evaluation)
          throw std::runtime_error(store_.path() + ": candidate " + std::to_string(candidate.id) +
                                   " points at a missing evaluation");
        objectives = objectives_of(outcomes_of(evaluation->id, evaluation->position_scores));
      }
      return resumed_outcome(*stored, std::move(objectives));
    }
    const Intervention intervention = in_.objective->decode(candidate.genome);
    const std::string key = evaluator_.cache_key(intervention);
    try {
      if (ahead != nullptr && ahead->result.error) std::rethrow_exception(ahead->result.error);
      if (auto partial = store_.find_partial_evaluation(key))
        return complete_and_record(experiment_id, generation, candidate, intervention, key, *partial, ahead);
      return store_candidate(experiment_id, generation, candidate, intervention, key, ahead);
    } catch (const BackendError& error) {
      record_failure(intervention, key, error);
      throw;
    }
  }

  // The transaction of a failed evaluation rolled back; keep a visible record
  // of the failure (never a score: failed rows are not served from the
  // cache). A race's partial row keeps the key and the samples stored so far.
  void record_failure(const Intervention& intervention, const std::string& key, const BackendError& error) {
    if (store_.find_partial_evaluation(key)) return;
    EvaluationRecord failed = evaluator_.describe(intervention, key);
    failed.status = "failed";
    failed.error = error.what();
    store_.insert_evaluation(failed, {});
  }

  // The backend runs outside any transaction (an evaluation may take
  // minutes; readers and other writers must not wait on it). Then one
  // transaction stores the evaluation, its samples, the individual and the
  // heartbeat together, or nothing.
  Outcome store_candidate(std::int64_t experiment_id, int generation, const Candidate& candidate,
                          const Intervention& intervention, const std::string& key,
                          const PrefetchedRun* ahead = nullptr) {
    std::optional<NewEvaluation> fresh;
    if (!store_.find_evaluation(key)) fresh = evaluator_.run(intervention, key, ahead);
    std::vector<double> objectives;
    const IndividualRecord record = store_.record_individual(
        run_id_, key,
        [&] {
          if (!fresh) fresh = evaluator_.run(intervention, key);
          return *fresh;
        },
        [&](const StoredEvaluation& e) {
          IndividualRecord r = individual_of(experiment_id, generation, candidate, e.id, e.cache_hit);
          const PositionOutcomes outcomes = outcomes_of(e.id, e.position_scores);
          r.fitness = search_fitness(in_.scoring, *in_.objective, outcomes);
          objectives = objectives_of(outcomes);
          return r;
        });
    const Outcome outcome{record.fitness, record.cache_hit, !record.cache_hit, objectives};
    count(outcome);
    return outcome;
  }

  // An individual row without its fitness.
  IndividualRecord individual_of(std::int64_t experiment_id, int generation, const Candidate& candidate,
                                 std::int64_t evaluation_id, bool cache_hit) const {
    IndividualRecord r;
    r.experiment_id = experiment_id;
    r.candidate_id = candidate.id;
    r.generation = generation;
    r.genome = genome_json(candidate.genome);
    r.genome_hash = fnv1a_hex(r.genome.dump());
    r.origin = to_string(candidate.origin);
    r.parents = candidate.parents;
    r.evaluation_id = evaluation_id;
    r.cache_hit = cache_hit;
    r.run_id = run_id_;
    return r;
  }

  // The individual of a race that ended (or of a partial row completed): on
  // the whole split its exact fitness; dropped after the first m units, the
  // estimate on their samples, marked raced (the strategy is told
  // -infinity, so it never becomes a parent).
  std::pair<IndividualRecord, Outcome> race_result(bool dropped, std::int64_t experiment_id, int generation,
                                                   const Candidate& candidate, std::int64_t evaluation_id,
                                                   const std::vector<SampleRecord>& samples, std::size_t m,
                                                   bool cache_hit) const {
    std::vector<SampleRecord> seen = samples;
    if (dropped) {
      std::vector<bool> in_slice(in_.items.size(), false);
      for (std::size_t k = 0; k < m; ++k)
        for (std::size_t item : units_[k]) in_slice[item] = true;
      seen.clear();
      for (const SampleRecord& s : samples)
        if (in_slice[evaluator_.item_index(s.sample_id)]) seen.push_back(s);
    }
    const SampleSummary summary = evaluator_.summarise(seen);
    const PositionOutcomes outcomes =
        position_outcomes(summary.position_scores, in_.scoring.needs_samples() ? seen : std::vector<SampleRecord>{});
    IndividualRecord r = individual_of(experiment_id, generation, candidate, evaluation_id, cache_hit);
    r.fitness = search_fitness(in_.scoring, *in_.objective, outcomes);
    if (dropped) {
      r.raced_samples = static_cast<int>(seen.size());
      return {r, {-INFINITY, cache_hit, !cache_hit, {}, true}};
    }
    return {r, {r.fitness, cache_hit, !cache_hit, objectives_of(outcomes)}};
  }

  void count(const Outcome& outcome) {
    (outcome.cache_hit ? summary_.cache_hits : summary_.evaluated) += 1;
    summary_.raced += outcome.raced;
  }

  // A partial row of this intervention (a race stopped early): only its
  // missing samples run; the completed row and the individual are one
  // transaction.
  Outcome complete_and_record(std::int64_t experiment_id, int generation, const Candidate& candidate,
                              const Intervention& intervention, const std::string& key,
                              const EvaluationRecord& partial, const PrefetchedRun* ahead) {
    const std::vector<SampleRecord> samples = store_.evaluation_samples(partial.id);
    std::optional<Outcome> outcome;
    evaluator_.complete_partial(
        store_, run_id_, intervention, key, samples,
        [&](const ExtendedEvaluation& e) {
          auto [record, result] = race_result(false, experiment_id, generation, candidate, e.id, e.samples, 0,
                                              e.was_complete || e.samples.size() == samples.size());
          outcome = result;
          return std::optional<IndividualRecord>(record);
        },
        ahead);
    count(*outcome);
    return *outcome;
  }

  // One candidate of a batch race: its samples so far, and its outcome once
  // the race ended for it (scored in full, or dropped after `dropped_at`
  // units).
  struct Entrant {
    const Candidate* candidate = nullptr;
    Intervention intervention;
    std::string key;
    std::int64_t evaluation_id = -1;  // its stored row, once it has one
    std::vector<SampleRecord> samples;
    std::int64_t samples_of = -1;  // the row `samples` were read from or written to (-1: none)
    std::optional<EvaluationRecord> description;  // evaluator_.describe(), made once
    std::optional<Outcome> outcome;
    std::size_t dropped_at = SIZE_MAX;
    bool ran = false;  // some sample ran for it in this process
  };

  // Racing (core/search/racing.hpp): the batch's candidates grow slice by
  // slice together, and each look drops those that cannot become parents.
  // Each slice's new samples of one candidate, the run's counters and, when
  // that slice completes it, its individual are one transaction; a dropped
  // candidate's individual is written once the look has decided. A resumed
  // run plays the looks again from the stored samples (its stored
  // individuals keep their stored outcome), so it decides as an
  // uninterrupted one and runs only the samples not stored yet.
  std::vector<Outcome> race_batch(std::int64_t experiment_id, int generation, const std::vector<Candidate>& batch,
                                  const RaceField& field) {
    std::vector<std::vector<SampleRecord>> carried;
    for (const std::int64_t id : field.carried) {
      const auto parent = store_.find_individual(experiment_id, id);
      if (!parent || parent->raced_samples)
        throw std::runtime_error(store_.path() + ": the carried parent, candidate " + std::to_string(id) +
                                 ", has no stored whole-split evaluation");
      carried.push_back(store_.evaluation_samples(parent->evaluation_id));
    }
    const std::size_t positions = in_.gold_positions.size();
    std::vector<Entrant> entrants(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Entrant& e = entrants[i];
      e.candidate = &batch[i];
      if (auto stored = stored_individual(experiment_id, batch[i])) {
        e.samples = store_.evaluation_samples(stored->evaluation_id);
        e.samples_of = stored->evaluation_id;
        e.outcome = resumed_outcome(*stored);
        if (stored->raced_samples) e.dropped_at = static_cast<std::size_t>(*stored->raced_samples) / positions;
        candidate_done(*e.outcome);
        continue;
      }
      e.intervention = in_.objective->decode(batch[i].genome);
      e.key = evaluator_.cache_key(e.intervention);
      if (const auto cached = store_.find_evaluation(e.key)) {  // scored in full before: nothing to race
        e.outcome = store_candidate(experiment_id, generation, batch[i], e.intervention, e.key);
        e.samples = store_.evaluation_samples(cached->id);
        e.samples_of = cached->id;
        candidate_done(*e.outcome);
      }
    }
    for (std::size_t step = 0; step < schedule_.size(); ++step) {
      const std::size_t m = schedule_[step];
      extend_all(experiment_id, generation, entrants, m, step + 1 < schedule_.size() ? schedule_[step + 1] : m);
      if (m < 2 || m >= units_.size()) continue;
      // The contenders of this look: the carried parents, then every
      // candidate not dropped at an earlier look.
      std::vector<RaceContender> contenders;
      for (const auto& parent : carried)
        contenders.push_back({race_values(parent, m), false, -1});
      std::vector<int> contender_of(entrants.size(), -1);
      for (std::size_t i = 0; i < entrants.size(); ++i) {
        if (entrants[i].dropped_at < m) continue;
        contender_of[i] = static_cast<int>(contenders.size());
        contenders.push_back({race_values(entrants[i].samples, m), !entrants[i].outcome, -1});
      }
      for (std::size_t i = 0; i < entrants.size(); ++i) {
        const int sibling = i < field.sibling.size() ? field.sibling[i] : -1;
        if (contender_of[i] >= 0 && sibling >= 0) contenders[contender_of[i]].sibling = contender_of[sibling];
      }
      const std::vector<bool> drop = race_drops(contenders, field.parents, units_.size(), in_.racing->confidence,
                                                looks_, race_margin(in_.scoring.fitness));
      for (std::size_t i = 0; i < entrants.size(); ++i) {
        Entrant& e = entrants[i];
        if (e.outcome || contender_of[i] < 0 || !drop[contender_of[i]]) continue;
        // Never a cache hit: the look that drops it may come after a restart
        // that found its slices stored, so "ran in this process" would
        // depend on where a run was killed.
        auto [record, outcome] = race_result(true, experiment_id, generation, *e.candidate, e.evaluation_id,
                                             e.samples, m, false);
        store_.insert_individual(record);
        e.dropped_at = m;
        e.outcome = outcome;
        count(outcome);
        candidate_done(outcome);
      }
    }
    std::vector<Outcome> outcomes;
    for (const Entrant& e : entrants) {
      if (!e.outcome) throw std::logic_error("racing: the schedule ended before the whole split");
      outcomes.push_back(*e.outcome);
    }
    return outcomes;
  }

  std::vector<double> race_values(const std::vector<SampleRecord>& samples, std::size_t m) const {
    return race_unit_values(units_, m, weights_, in_.position_index, by_item(samples), in_.scoring.fitness);
  }

  // Every entrant still racing grows to units [0, m), as extend() grows
  // them one after another, with their runs handed to the backend together
  // (as evaluate_batch() does for a batch without racing).
  //
  // Speculation: the look after this step waits for the step's last units,
  // and evaluators with nothing left would wait with it. So each entrant's
  // items of the next step's units [m, next) (what it needs if the look
  // keeps it) are planned as speculative runs, which only such evaluators
  // take; the backend keeps their answers (also past this call, while the
  // look runs), and the next step's run of the same items takes them
  // instead of computing them again. Only that run stores them, as it would
  // without speculation, so the stored rows are the same; the runs of
  // entrants the look dropped are thrown away.
  void extend_all(std::int64_t experiment_id, int generation, std::vector<Entrant>& entrants, std::size_t m,
                  std::size_t next) {
    std::vector<Entrant*> racing;
    for (Entrant& e : entrants)
      if (!e.outcome) racing.push_back(&e);
    std::vector<std::vector<std::size_t>> later(racing.size());
    RunPlan plan;
    bool planned = true;
    for (std::size_t k = 0; k < racing.size(); ++k) {
      Extension x = extension_of(*racing[k], m);
      later[k] = missing_in(racing[k]->samples, m, next);
      if (!evaluator_.plan_run(plan, k, racing[k]->intervention, racing[k]->key, std::move(x.missing))) {
        planned = false;  // that entrant fails in its turn: nothing to speculate on
        break;
      }
    }
    for (std::size_t k = 0; speculate_ && planned && k < racing.size(); ++k)
      evaluator_.plan_run(plan, k, racing[k]->intervention, racing[k]->key, std::move(later[k]), true);
    in_order(plan, racing.size(), [&](std::size_t k, const PrefetchedRun* run) {
      extend(experiment_id, generation, *racing[k], m, run);
    });
  }

  // The split's items of units [from, to) that `samples` lacks, in racing order.
  std::vector<std::size_t> missing_in(const std::vector<SampleRecord>& samples, std::size_t from,
                                      std::size_t to) const {
    std::vector<bool> have(in_.items.size(), false);
    for (const SampleRecord& s : samples) have[evaluator_.item_index(s.sample_id)] = true;
    std::vector<std::size_t> missing;
    for (std::size_t k = from; k < to; ++k)
      for (std::size_t item : units_[k])
        if (!have[item]) missing.push_back(item);
    return missing;
  }

  // What growing an entrant to units [0, m) finds stored under its key, and
  // the items of those units still missing. The entrant's samples are
  // brought up to date with its row: kept while the row still holds as many
  // as it has (samples are only added), read again when another candidate
  // or process added some.
  struct Extension {
    bool complete = false;  // another candidate or process completed the row
    std::int64_t partial_id = -1;
    std::vector<std::size_t> missing;
  };
  Extension extension_of(Entrant& e, std::size_t m) const {
    Extension x;
    if (const auto row = store_.evaluation_state(e.key)) {
      x.complete = row->complete;
      if (!row->complete) x.partial_id = row->id;
      if (row->id != e.samples_of || row->samples != static_cast<std::int64_t>(e.samples.size())) {
        e.samples = store_.evaluation_samples(row->id);
        e.samples_of = row->id;
      }
    } else {
      e.samples.clear();
      e.samples_of = -1;
    }
    x.missing = missing_in(e.samples, 0, m);
    return x;
  }

  // Runs the items of units [0, m) that the candidate's stored row lacks, in
  // one transaction with its individual when that completes the row.
  // `ahead`: the run of those items, made ahead of its turn.
  void extend(std::int64_t experiment_id, int generation, Entrant& e, std::size_t m,
              const PrefetchedRun* ahead = nullptr) {
    Extension x = extension_of(e, m);
    if (x.partial_id >= 0) e.evaluation_id = x.partial_id;
    if (x.missing.empty() && !x.complete) return;
    if (!e.description) e.description = evaluator_.describe(e.intervention, e.key);
    EvaluationRecord& record = *e.description;
    record.wall_seconds = 0.0;
    std::vector<SampleRecord> fresh;
    try {
      fresh = evaluator_.run_items(e.intervention, x.missing, record.wall_seconds, ahead);
    } catch (const BackendError& error) {
      record_failure(e.intervention, e.key, error);
      throw;
    }
    e.ran = e.ran || !fresh.empty();
    ExtendedEvaluation stored = store_.add_samples(
        run_id_, record, fresh, [this](const std::vector<SampleRecord>& all) { return evaluator_.summarise(all); },
        [&](const ExtendedEvaluation& grown) -> std::optional<IndividualRecord> {
          if (!grown.complete) return std::nullopt;
          auto [r, result] =
              race_result(false, experiment_id, generation, *e.candidate, grown.id, grown.samples, 0, !e.ran);
          e.outcome = result;
          return r;
        },
        KnownSamples{e.samples_of, &e.samples});
    e.samples = std::move(stored.samples);
    e.samples_of = stored.id;
    e.evaluation_id = stored.id;
    if (e.outcome) {
      count(*e.outcome);
      candidate_done(*e.outcome);
    }
  }

  // Saves the strategy state after tell(); best/mean are over the population
  // the strategy now holds (for a GA: parents carried over + new children).
  std::pair<double, double> checkpoint(std::int64_t experiment_id, int generation, const Strategy& strategy,
                                       const std::vector<double>& batch_fitness) {
    GenerationRecord record;
    record.experiment_id = experiment_id;
    record.generation = generation;
    record.population = strategy.population();
    record.strategy_state = strategy.save_state();
    if (const auto stats = store_.fitness_of_candidates(experiment_id, record.population)) {
      record.best_fitness = stats->best;
      record.mean_fitness = stats->mean;
    } else {  // a strategy without a population: the batch itself
      record.best_fitness = *std::max_element(batch_fitness.begin(), batch_fitness.end());
      record.mean_fitness =
          std::accumulate(batch_fitness.begin(), batch_fitness.end(), 0.0) / static_cast<double>(batch_fitness.size());
    }
    store_.save_checkpoint(record, run_id_);
    record_workers(true);
    return {*record.best_fitness, *record.mean_fitness};
  }

  void fill_best(std::int64_t experiment_id) {
    if (const auto best = store_.best_individual(experiment_id)) {
      summary_.best_candidate = best->individual.candidate_id;
      summary_.best_fitness = best->individual.fitness;
    }
  }

  Store& store_;
  const SearchInputs& in_;
  SearchProgress& progress_;
  Evaluator evaluator_;
  std::int64_t run_id_ = -1;
  RunSummary summary_;
  // Racing: units in racing order, slice ends, looks and per-position
  // weights (the slices' samples are read from the store).
  std::vector<std::vector<std::size_t>> units_;
  std::vector<std::size_t> schedule_;
  std::size_t looks_ = 0;
  std::vector<double> weights_;
  bool speculate_ = false;
  int done_candidates_ = 0;
  double best_ = -INFINITY;
  std::chrono::steady_clock::time_point workers_recorded_{};
};

}  // namespace

RunSummary run_search(Store& store, const SearchInputs& inputs, SearchProgress& progress) {
  return SearchRun(store, inputs, progress).run();
}

}  // namespace midtune
