#include "core/search/heldout.hpp"

#include <stdexcept>

#include "objectives/objective.hpp"

namespace midtune {

using nlohmann::json;

json layer_scales(const json& intervention) {
  json out = json::array();
  if (!intervention.contains("rope_scale")) return out;
  for (const json& row : intervention.at("rope_scale")) out.push_back(row.size() == 1 ? row.at(0) : row);
  return out;
}

Intervention best_intervention(Store& store, std::int64_t experiment_id) {
  const auto best = store.best_individual(experiment_id);
  if (!best) throw std::runtime_error("the experiment has no evaluated individual yet");
  return Intervention::from_json(best->intervention);
}

Intervention pi_at_mean_scale(const Intervention& best) {
  double sum = 0.0;
  std::size_t count = 0;
  for (const auto& row : best.rope_scale) {
    for (double value : row) {
      sum += value;
      ++count;
    }
  }
  Intervention pi;
  if (count > 0) pi.rope_scale = {{sum / static_cast<double>(count)}};
  return pi;
}

std::vector<HeldoutEntry> run_heldout(Store& store, std::int64_t experiment_id, const EvaluationInputs& heldout_inputs,
                                      const Objective* objective, const std::function<void(const std::string&)>& note) {
  const Intervention best = best_intervention(store, experiment_id);
  std::vector<HeldoutEntry> entries = {{"best", best, {}}, {"baseline", Intervention{}, {}}};
  // PI at the mean scale only means something when the best changes RoPE scales.
  if (!best.rope_scale.empty()) entries.push_back({"pi-mean", pi_at_mean_scale(best), {}});
  if (objective != nullptr) {
    if (auto paper = objective->paper_default()) {
      // The papers' layer ranges are for 32-layer models; on a shallower one
      // there is no paper default to compare with.
      try {
        heldout_inputs.backend->validate(*paper);
        entries.push_back({"paper-default", *paper, {}});
      } catch (const std::exception& error) {
        if (note) note("no paper-default row (" + std::string(error.what()) + ")");
      }
    }
  }
  const Evaluator evaluator(heldout_inputs);
  for (HeldoutEntry& entry : entries) {
    entry.evaluation = evaluator.evaluate(store, entry.intervention);
    store.record_heldout(experiment_id, entry.role, "heldout", entry.evaluation.evaluation_id);
  }
  return entries;
}

json heldout_json(Store& store, std::int64_t experiment_id) {
  json out = json::array();
  for (const HeldoutRow& row : store.heldout_rows(experiment_id)) {
    out.push_back({{"role", row.role},
                   {"split", row.split},
                   {"intervention", row.intervention},
                   {"layer_scales", layer_scales(row.intervention)},
                   {"position_scores", row.position_scores},
                   {"summary", row.fitness_inputs},
                   {"metric", row.metric}});
  }
  return out;
}

}  // namespace midtune
