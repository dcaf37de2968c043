#include "core/search/heldout.hpp"

#include <algorithm>
#include <limits>
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

std::vector<FrontMember> pareto_front(Store& store, std::int64_t experiment_id) {
  std::vector<FrontMember> front;
  const auto checkpoint = store.latest_generation(experiment_id);
  if (!checkpoint || checkpoint->strategy_state.value("strategy", "") != "nsga2") return front;
  // Objective values are numbers, or "inf"/"-inf" (core/ga/state_json.hpp).
  const auto value = [](const json& v) {
    if (v.is_number()) return v.get<double>();
    return v == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  };
  for (const json& member : checkpoint->strategy_state.at("population")) {
    if (member.at("rank").get<int>() != 0) continue;
    FrontMember m{member.at("id").get<std::int64_t>(), {}};
    for (const json& v : member.at("objectives")) m.objectives.push_back(value(v));
    front.push_back(std::move(m));
  }
  std::sort(front.begin(), front.end(), [](const FrontMember& a, const FrontMember& b) { return a.candidate_id < b.candidate_id; });
  return front;
}

std::vector<HeldoutEntry> run_heldout(Store& store, std::int64_t experiment_id, const EvaluationInputs& heldout_inputs,
                                      const Objective* objective, const std::function<void(const std::string&)>& note) {
  const Intervention best = best_intervention(store, experiment_id);
  std::vector<HeldoutEntry> entries = {{"best", best, {}}, {"baseline", Intervention{}, {}}};
  // PI at the mean scale only means something when the best changes RoPE scales.
  if (!best.rope_scale.empty()) entries.push_back({"pi-mean", pi_at_mean_scale(best), {}});
  if (objective != nullptr) {
    if (auto paper = objective->paper_default()) {
      // A paper setting this model cannot run (a layer it lacks, a head
      // size, ...) gets no row, said why.
      try {
        heldout_inputs.backend->validate(*paper);
        entries.push_back({"paper-default", *paper, {}});
      } catch (const std::exception& error) {
        if (note) note("no paper-default row (" + std::string(error.what()) + ")");
      }
    }
  }
  const auto best_id = store.best_individual(experiment_id)->individual.candidate_id;
  for (const FrontMember& member : pareto_front(store, experiment_id)) {
    if (member.candidate_id == best_id) continue;  // already the best row
    const auto individual = store.find_individual(experiment_id, member.candidate_id);
    const auto evaluation = individual ? store.evaluation(individual->evaluation_id) : std::nullopt;
    if (!evaluation) throw std::runtime_error("front member " + std::to_string(member.candidate_id) + " is not stored");
    entries.push_back({"front-" + std::to_string(member.candidate_id),
                       Intervention::from_json(json::parse(evaluation->intervention)), {}});
  }
  // Every role's run handed to the backend together: MPI evaluator ranks
  // work on all of them at once.
  std::vector<Intervention> interventions;
  for (const HeldoutEntry& entry : entries) interventions.push_back(entry.intervention);
  Evaluator(heldout_inputs).evaluate_all(store, interventions, [&](std::size_t i, SplitEvaluation evaluation) {
    entries[i].evaluation = std::move(evaluation);
    store.record_heldout(experiment_id, entries[i].role, "heldout", entries[i].evaluation.evaluation_id);
  });
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
