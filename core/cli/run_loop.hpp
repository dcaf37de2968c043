// The search loop (DESIGN.md "Data flow"): ask -> decode -> cache lookup or
// backend run -> score -> per-position accuracy -> fitness -> store -> tell
// -> checkpoint. Every step lands in the results database so a run killed at
// any moment resumes exactly: individuals already stored are re-used, the
// strategy is restored from the last generation checkpoint, and at most the
// evaluation in flight is redone.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "core/cli/progress.hpp"
#include "core/experiment/experiment.hpp"
#include "core/ga/strategy.hpp"
#include "objectives/objective.hpp"
#include "schema/store.hpp"

namespace midtune {

// Resuming an experiment whose stored search differs from the file's.
struct ResumeRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Decides correct/incorrect for sample `index` of search_items under the
// experiment's metric.
using SampleScorer = std::function<bool(std::size_t index, const SampleOutput& output)>;

struct SearchInputs {
  std::string experiment_name;
  std::string config_text;      // the YAML as given, stored with the experiment
  std::string source_path;
  // Everything that decides the search (Experiment::search_fingerprint());
  // a resume with a different one is refused, naming search_differences().
  nlohmann::json search_config;
  Backend* backend = nullptr;
  const Objective* objective = nullptr;
  std::function<std::unique_ptr<Strategy>()> make_strategy;
  std::vector<BatchItem> search_items;
  std::vector<double> gold_positions;       // the experiment's listed positions
  std::vector<std::size_t> position_index;  // per search item, into gold_positions
  nlohmann::json dataset_slice;        // describes search_items (part of the cache key)
  std::string metric;                  // metric text (part of the cache key)
  RunOptions run_options;
  SampleScorer score;
  int planned_generations = 0;  // for progress and ETA only; 0 = unknown
};

struct RunSummary {
  std::int64_t experiment_id = -1;
  int generations_done = 0;
  int evaluated = 0;      // backend evaluations this process made
  int cache_hits = 0;     // candidates served from the cache this process
  int resumed_individuals = 0;  // candidates found already stored (resume)
  bool already_complete = false;
  std::int64_t best_candidate = -1;
  double best_fitness = 0.0;
};

// The cache key: canonical intervention + dataset slice + metric + model.
std::string evaluation_cache_key(const Intervention& intervention, const nlohmann::json& dataset_slice,
                                 const std::string& metric, const ModelIdentity& model);

RunSummary run_search(Store& store, const SearchInputs& inputs, cli::Progress& progress);

}  // namespace midtune
