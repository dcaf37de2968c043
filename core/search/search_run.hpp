// The search loop (docs/design.md "Data flow"): ask -> decode -> Evaluator
// (cache look-up or backend run -> score -> per-position tally) -> fitness
// -> store -> tell -> checkpoint. Every step lands in the results database
// so a run killed at any moment resumes exactly: individuals already stored
// are re-used, the strategy is restored from the last generation checkpoint,
// and at most the evaluation in flight is redone.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/ga/strategy.hpp"
#include "core/search/evaluator.hpp"
#include "core/search/fitness.hpp"
#include "core/search/progress.hpp"
#include "core/search/racing.hpp"
#include "objectives/objective.hpp"
#include "schema/store.hpp"

namespace midtune {

// Resuming an experiment whose stored search differs from the file's.
struct ResumeRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The search split's evaluation inputs plus what decides the search.
struct SearchInputs : EvaluationInputs {
  std::string experiment_name;
  std::string config_text;  // the YAML as given, stored with the experiment
  std::string source_path;
  // Everything that decides the search (Experiment::search_fingerprint());
  // a resume with a different one is refused, naming search_differences().
  nlohmann::json search_config;
  // What computes this run's rows (core/cli/build_info.hpp), stored with the run.
  nlohmann::json provenance;
  const Objective* objective = nullptr;
  // The stored fitness (and, for nsga2, the objectives told to the strategy).
  SearchScoring scoring;
  std::function<std::unique_ptr<Strategy>()> make_strategy;
  int planned_generations = 0;  // for progress and ETA only; 0 = unknown
  // The strategy redraws known children: give it the experiment's proposal
  // memory (the cache keys of the individuals of earlier generations).
  bool unique_children = false;
  // search.racing (ga only): a batch races for the strategy's parent places.
  std::optional<RaceSettings> racing;
  // Per item, the key that pairs items across gold positions into racing
  // units (the base item); empty: each item's own index.
  std::vector<std::string> race_keys;
};

struct RunSummary {
  std::int64_t experiment_id = -1;
  int generations_done = 0;
  int evaluated = 0;            // backend evaluations this process made
  int cache_hits = 0;           // candidates served from the cache this process
  int raced = 0;                // candidates racing dropped this process
  int resumed_individuals = 0;  // candidates found already stored (resume)
  bool already_complete = false;
  std::int64_t best_candidate = -1;
  double best_fitness = 0.0;
};

RunSummary run_search(Store& store, const SearchInputs& inputs, SearchProgress& progress);

}  // namespace midtune
