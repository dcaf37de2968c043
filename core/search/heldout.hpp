// The held-out step: the evaluations a finished search ends with — its best
// individual, the baseline (no intervention), PI at the mean of the best
// curve's per-layer scales or the method's paper default — stored in
// heldout_results (schema/migrations/0003) by role.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/intervention.hpp"
#include "core/search/evaluator.hpp"
#include "objectives/objective.hpp"
#include "schema/store.hpp"

namespace midtune {

// The intervention of the experiment's best individual (highest fitness,
// lowest candidate id on ties). Throws std::runtime_error when there is none.
Intervention best_intervention(Store& store, std::int64_t experiment_id);

// PI at the mean of every RoPE scale `best` sets (1 when it sets none).
Intervention pi_at_mean_scale(const Intervention& best);

// A member of an nsga2 experiment's final Pareto front.
struct FrontMember {
  std::int64_t candidate_id = -1;
  std::vector<double> objectives;  // in search.objectives order, all maximised
};

// The first front of the population in the experiment's latest checkpoint
// (nsga2 keeps each member's rank there); empty for the other strategies.
std::vector<FrontMember> pareto_front(Store& store, std::int64_t experiment_id);

struct HeldoutEntry {
  // best | baseline | pi-mean (LPES, PI) | paper-default (Ms-PoE, SIW,
  // CALIOPE, PHS) | front-<candidate id> (nsga2: every other front member)
  std::string role;
  Intervention intervention;
  SplitEvaluation evaluation;
};

// Evaluates the best, the baseline, PI at the best's mean scale (when the best
// sets RoPE scales) and the objective's paper default (when `objective` has
// one), and for nsga2 every member of the final front, on `heldout_inputs` (the held-out split, on the search's backend) and
// records them in heldout_results for `experiment_id`. `note` hears why a
// row is left out.
std::vector<HeldoutEntry> run_heldout(Store& store, std::int64_t experiment_id, const EvaluationInputs& heldout_inputs,
                                      const Objective* objective,
                                      const std::function<void(const std::string&)>& note = {});

// Per-layer scales of a stored Intervention as reports show them: one value
// per layer (LPES), one value for all (PI), or the per-head row.
nlohmann::json layer_scales(const nlohmann::json& intervention);

// The stored held-out results of an experiment for reports:
// [{role, split, intervention, layer_scales, position_scores, summary}], empty
// when none (or the database predates schema version 3).
nlohmann::json heldout_json(Store& store, std::int64_t experiment_id);

}  // namespace midtune
