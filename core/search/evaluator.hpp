// One evaluation, the same for the search, the held-out step and
// `ga-run eval`: Intervention -> cache look-up -> backend run -> score each
// sample -> per-position tally -> evaluation record (docs/design.md "Data
// flow"). The cache key is the canonical Intervention + dataset slice +
// metric + model, so equal work is never repeated, whichever caller asked.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "objectives/metrics.hpp"
#include "schema/store.hpp"

namespace midtune {

// Decides correct/incorrect for sample `index` of the evaluated items under
// the experiment's metric.
using SampleScorer = std::function<bool(std::size_t index, const SampleOutput& output)>;

// The prompts one evaluation runs, on which backend, and how they are scored.
struct EvaluationInputs {
  Backend* backend = nullptr;
  std::vector<BatchItem> items;             // one split of the experiment's data
  std::vector<double> gold_positions;       // the experiment's listed positions
  std::vector<std::size_t> position_index;  // per item, into gold_positions
  nlohmann::json dataset_slice;             // describes items (part of the cache key)
  std::string metric;                       // metric text (part of the cache key)
  RunOptions run_options;
  SampleScorer score;
  // An evaluation of more items than this, run on its own (not handed over
  // with others), runs and stores them this many at a time as one partial
  // row: a run killed during a long evaluation (a held-out step or `ga-run
  // eval` of hundreds of long prompts) loses one slice, and the next run
  // completes the row from the samples stored. 0: the whole split at once.
  std::size_t stored_slice_items = 16;
  // Non-zero once the process is asked to stop (the signal's number, set by
  // a signal handler): a search throws RunStopped before its next
  // evaluation, a long evaluation before its next slice, so everything
  // finished stays stored. Null: never stops.
  const std::atomic<int>* stop_signal = nullptr;
};

// Whether `stop` (an EvaluationInputs::stop_signal) asks the run to stop.
inline bool stop_requested(const std::atomic<int>* stop) { return stop != nullptr && stop->load() != 0; }

// The cache key: canonical intervention + dataset slice + metric + model.
std::string evaluation_cache_key(const Intervention& intervention, const nlohmann::json& dataset_slice,
                                 const std::string& metric, const ModelIdentity& model);

// Stored scores back as the tallies objectives read (fitness, summaries).
std::vector<metrics::PositionAccuracy> position_tallies(const std::vector<PositionScore>& scores);

// The position summary stored beside the scores (mean, gap, std, U-shape
// covariance, Pearson r); {} when a position has no samples.
nlohmann::json position_summary_json(const std::vector<PositionScore>& scores);

// An evaluation as the held-out step and `ga-run eval` show it.
struct SplitEvaluation {
  std::int64_t evaluation_id = -1;
  std::vector<PositionScore> scores;
  nlohmann::json summary;  // position_summary_json
  bool cache_hit = false;
  double wall_seconds = 0.0;
  // Samples of this row already stored when this evaluation began (a
  // partial row it completed), 0 when it ran every item or none.
  std::size_t resumed_samples = 0;
};

// A backend run made ahead of its turn (Backend::run_each, several
// evaluations side by side): the split's items it ran and its result. Used
// only where the evaluation, when its turn comes, needs exactly these items.
struct PrefetchedRun {
  std::vector<std::size_t> items;
  RunJobResult result;
};

// Backend runs planned for a list of work (a batch's candidates, a racing
// step's entrants, the held-out step's roles), handed to the backend
// together; speculative runs (RunJob::speculative: work a later call may
// want) after all others.
struct RunPlan {
  std::vector<RunJob> jobs;
  std::vector<std::size_t> owner;               // per job, the work it is for
  std::vector<std::vector<std::size_t>> items;  // per job, the split's items it runs
  std::set<std::string> keys;                   // the cache keys planned
  std::set<std::string> speculative_keys;       // the cache keys planned speculatively
};

// Runs the plan's jobs side by side (Backend::run_each) and calls
// handle(w, ahead) for work w = 0 .. count-1 in order, as the backend
// finishes them; `ahead` is w's planned run, or null when it has none
// (speculative runs are only hints to the backend: none is handed on).
// Once `stop` is non-zero
// no new job starts and RunStopped is thrown between two pieces of work,
// with everything handled so far done.
void run_in_order(Backend& backend, const RunOptions& options, const RunPlan& plan, std::size_t count,
                  const std::function<void(std::size_t, const PrefetchedRun*)>& handle,
                  const std::atomic<int>* stop = nullptr);

class Evaluator {
 public:
  // Asks the backend for its model identity once.
  explicit Evaluator(const EvaluationInputs& inputs);

  const ModelIdentity& model() const { return model_; }
  std::string cache_key(const Intervention& intervention) const;
  // The identifying part of an evaluation row (what was run, on what).
  EvaluationRecord describe(const Intervention& intervention, const std::string& key) const;
  // Runs the backend on every item and scores and tallies the outputs; stores
  // nothing. Throws BackendError (also when the backend returns the wrong
  // number of outputs) and std::invalid_argument (an Intervention the model
  // refuses). With `ahead` a run of all_items(), its result is scored
  // instead (its error rethrown).
  NewEvaluation run(const Intervention& intervention, const std::string& key,
                    const PrefetchedRun* ahead = nullptr) const;
  // The stored evaluation with the same cache key, or run() and store it. A
  // partial row under the key (a race's, or a sliced evaluation's that was
  // stopped) is completed: only its missing samples run. Without `ahead`, a
  // split larger than stored_slice_items runs and stores in slices.
  SplitEvaluation evaluate(Store& store, const Intervention& intervention,
                           const PrefetchedRun* ahead = nullptr) const;
  // evaluate() for each intervention, in order, with the backend runs they
  // need handed to the backend together; each result goes to `stored` as
  // soon as it is stored.
  void evaluate_all(Store& store, const std::vector<Intervention>& interventions,
                    const std::function<void(std::size_t, SplitEvaluation)>& stored) const;

  // Several evaluations side by side (Backend::run_each): the job that runs
  // the split's items at `items`, in that order.
  RunJob job(const Intervention& intervention, const std::vector<std::size_t>& items) const;
  // Every item of the split, in order.
  std::vector<std::size_t> all_items() const;
  // The split's items that `samples` (a partial row's) lacks, in order.
  std::vector<std::size_t> missing_items(const std::vector<SampleRecord>& samples) const;
  // What evaluate() would run for the intervention with this cache key:
  // nothing when its row is stored, a partial row's missing items, or all.
  std::vector<std::size_t> items_to_run(Store& store, const std::string& key) const;
  // Adds to `plan` the run of `items` for work `work`, unless `items` is
  // empty or the key is planned already (the earlier work's run stores it,
  // and this one finds it by its turn). Returns false, adding nothing, when
  // the model refuses the intervention: planning stops there, and that work
  // fails in its turn as it would alone. `speculative` runs are planned
  // after all others, and once per key among themselves.
  bool plan_run(RunPlan& plan, std::size_t work, const Intervention& intervention, const std::string& key,
                std::vector<std::size_t> items, bool speculative = false) const;

  // Runs and scores the items at `indices` only (racing's slices); adds the
  // backend's wall time to `seconds`. Throws as run() does. `ahead`, when
  // it ran exactly these items, is scored instead.
  std::vector<SampleRecord> run_items(const Intervention& intervention, const std::vector<std::size_t>& indices,
                                      double& seconds, const PrefetchedRun* ahead = nullptr) const;
  // The per-position tallies of whichever items `samples` hold (by
  // sample_id), and whether they are all the split's items.
  SampleSummary summarise(const std::vector<SampleRecord>& samples) const;
  // Index of the split's item with this id; throws std::invalid_argument for
  // an id the split does not have.
  std::size_t item_index(const std::string& sample_id) const;
  // Runs the split's items that `samples` (a partial row's) lacks, and
  // stores them with Store::add_samples (with `individual`, in one
  // transaction).
  ExtendedEvaluation complete_partial(Store& store, std::optional<std::int64_t> run_id,
                                      const Intervention& intervention, const std::string& key,
                                      const std::vector<SampleRecord>& samples,
                                      const Store::IndividualOf& individual = {},
                                      const PrefetchedRun* ahead = nullptr) const;

 private:
  // Runs the items `samples` lacks stored_slice_items at a time, each slice
  // added to the key's row as it ends.
  SplitEvaluation complete_in_slices(Store& store, const Intervention& intervention, const std::string& key,
                                     const std::vector<SampleRecord>& samples) const;
  bool runs_in_slices(std::size_t items) const;
  NewEvaluation scored(const Intervention& intervention, const std::string& key, const RunJobResult& result) const;
  std::vector<SampleRecord> scored_items(const std::vector<std::size_t>& indices, const RunJobResult& result) const;
  SampleRecord sample_record(std::size_t index, const SampleOutput& output) const;
  const EvaluationInputs& in_;
  ModelIdentity model_;
  std::unordered_map<std::string, std::size_t> index_of_;  // looked up for every sample of every look
};

// Evaluator(inputs).evaluate(store, intervention).
SplitEvaluation evaluate_on_split(Store& store, const EvaluationInputs& inputs, const Intervention& intervention);

}  // namespace midtune
