// Held-out evaluation (issue 4 item 4): one Intervention evaluated on a
// split's prompts through the evaluation cache, and the three evaluations a
// finished search ends with — its best individual, the baseline (no
// intervention) and PI at the mean of the best curve's per-layer scales —
// stored in heldout_results (schema/migrations/0003) by role.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/intervention.hpp"
#include "core/cli/run_loop.hpp"
#include "schema/store.hpp"

namespace midtune {

struct SplitEvaluation {
  std::int64_t evaluation_id = -1;
  std::vector<PositionScore> scores;
  nlohmann::json summary;  // mean_percent, gap_points, std_percent, u_shape_covariance, u_shape_pearson
  bool cache_hit = false;
  double wall_seconds = 0.0;
};

// Runs `intervention` on inputs.search_items (whichever split they hold),
// or takes the stored evaluation with the same cache key. Stores the
// evaluation and its samples. Throws BackendError / std::invalid_argument.
SplitEvaluation evaluate_on_split(Store& store, const SearchInputs& inputs, const Intervention& intervention);

// The position summary stored beside the scores; {} when a position has no
// samples.
nlohmann::json position_summary_json(const std::vector<PositionScore>& scores);

// The intervention of the experiment's best individual (highest fitness,
// lowest candidate id on ties). Throws std::runtime_error when there is none.
Intervention best_intervention(Store& store, std::int64_t experiment_id);

// PI at the mean of every RoPE scale `best` sets (1 when it sets none).
Intervention pi_at_mean_scale(const Intervention& best);

struct HeldoutEntry {
  std::string role;  // best | baseline | pi-mean (LPES, PI) | paper-default (issue-5 methods)
  Intervention intervention;
  SplitEvaluation evaluation;
};

// Evaluates the best, the baseline, PI at the best's mean scale (when the best
// sets RoPE scales) and the objective's paper default (when it has one) on
// `heldout_inputs` (the held-out split) and
// records them in heldout_results for `experiment_id`.
std::vector<HeldoutEntry> run_heldout(Store& store, std::int64_t experiment_id, const SearchInputs& heldout_inputs);

// The stored held-out results of an experiment for reports:
// [{role, split, intervention, layer_scales, position_scores, summary}], empty
// when none (or the database predates schema version 3).
nlohmann::json heldout_json(Store& store, std::int64_t experiment_id);

}  // namespace midtune
