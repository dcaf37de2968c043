// From a validated Experiment to the parts the run loop needs: the backend,
// the objective, the strategy factory, the search split and its scorer.
#pragma once

#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "core/search/search_run.hpp"
#include "core/experiment/experiment.hpp"
#include "datasets/slice.hpp"
#include "objectives/objective.hpp"

namespace midtune {

// Builds the backend an experiment names. synthetic-test-double is built
// only when the file says so; engine and server need their libraries.
// Throws std::invalid_argument for a kind this build cannot run.
std::unique_ptr<Backend> make_backend(const Experiment& experiment);

// The core/ga factory's configuration for the experiment's search section.
nlohmann::json strategy_config(const SearchConfig& search);
// Batches the strategy will ask for (for progress); 0 when unknown.
int planned_generations(const SearchConfig& search);

// One split of the experiment's data, wrapped for a backend, with its scorer.
struct PreparedSplit {
  datasets::Slice slice;
  EvaluationInputs inputs;  // points into slice and at the backend
};

// Everything one `ga-run EXPERIMENT.yaml` process holds while it runs.
struct PreparedSearch {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Objective> objective;
  datasets::Slice slice;
  SearchInputs inputs;  // points into the members above
};

// Throws ConfigError (backend.model / dataset.file) when a file the
// experiment reads does not exist, saying where such a file comes from.
void require_input_files(const Experiment& experiment);

// Throws ConfigError (objective) when the start genome, or any gene at an
// end of its range, decodes to an Intervention the backend refuses.
void require_searchable_on_backend(const Experiment& experiment, const Objective& objective, const Backend& backend);

// The prompts of `split` for `backend` (the held-out step reuses the
// search's backend: the model is loaded once).
std::unique_ptr<PreparedSplit> prepare_split(const Experiment& experiment, Backend& backend, datasets::Split split);

// experiment_name overrides experiment.name (--new-experiment). `split`
// chooses the prompts (`ga-run eval` may use heldout). `backend`: one built
// already (MPI ranks' dispatch backend); null: make_backend(experiment).
std::unique_ptr<PreparedSearch> prepare_search(const Experiment& experiment, const std::string& experiment_name,
                                               datasets::Split split = datasets::Split::search,
                                               std::unique_ptr<Backend> backend = nullptr);

}  // namespace midtune
