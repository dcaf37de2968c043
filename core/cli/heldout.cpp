#include "core/cli/heldout.hpp"

#include <chrono>
#include <iostream>
#include <stdexcept>

#include "objectives/metrics.hpp"
#include "objectives/objective.hpp"

namespace midtune {

using nlohmann::json;

namespace {

std::vector<metrics::PositionAccuracy> tallies(const std::vector<PositionScore>& scores) {
  std::vector<metrics::PositionAccuracy> out;
  for (const PositionScore& s : scores)
    out.push_back({s.position, static_cast<std::size_t>(s.correct), static_cast<std::size_t>(s.samples)});
  return out;
}

SplitEvaluation from_record(const EvaluationRecord& record, bool cache_hit) {
  return {record.id, record.position_scores, record.fitness_inputs, cache_hit, record.wall_seconds};
}

// Per-layer scales as reports show them: one value per layer (LPES), one
// value for all (PI), or the per-head row.
json layer_scales(const json& intervention) {
  json out = json::array();
  if (!intervention.contains("rope_scale")) return out;
  for (const json& row : intervention.at("rope_scale")) out.push_back(row.size() == 1 ? row.at(0) : row);
  return out;
}

}  // namespace

json position_summary_json(const std::vector<PositionScore>& scores) {
  try {
    const metrics::PositionSummary s = metrics::summarize(tallies(scores));
    return {{"mean_percent", s.mean}, {"gap_points", s.gap}, {"std_percent", s.std_dev},
            {"u_shape_covariance", s.u_shape_covariance}, {"u_shape_pearson", s.u_shape_pearson}};
  } catch (const std::invalid_argument&) {
    return json::object();
  }
}

SplitEvaluation evaluate_on_split(Store& store, const SearchInputs& in, const Intervention& intervention) {
  const ModelIdentity model = in.backend->identity();
  const std::string key = evaluation_cache_key(intervention, in.dataset_slice, in.metric, model);
  if (auto cached = store.find_evaluation(key)) return from_record(*cached, true);

  in.backend->validate(intervention);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<SampleOutput> outputs = in.backend->run(intervention, in.search_items, in.run_options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (outputs.size() != in.search_items.size())
    throw BackendError("backend returned " + std::to_string(outputs.size()) + " outputs for " +
                       std::to_string(in.search_items.size()) + " prompts");
  std::vector<bool> correct;
  std::vector<SampleRecord> samples;
  const bool teacher_forced = in.run_options.mode == Mode::teacher_forced;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const bool ok = in.score(i, outputs[i]);
    correct.push_back(ok);
    samples.push_back({in.search_items[i].id, in.search_items[i].gold_depth, ok, outputs[i].output_text,
                       teacher_forced ? std::optional(outputs[i].gold_logprob) : std::nullopt,
                       outputs[i].prompt_tokens});
  }
  EvaluationRecord record;
  record.cache_key = key;
  record.key_hash = fnv1a_hex(key);
  record.intervention = intervention.to_json().dump();
  record.dataset_slice = in.dataset_slice.dump();
  record.metric = in.metric;
  record.model = model.key();
  for (const metrics::PositionAccuracy& p : metrics::tally_by_position(in.gold_positions, in.position_index, correct))
    record.position_scores.push_back(
        {p.position, p.total ? p.accuracy() : 0.0, static_cast<int>(p.correct), static_cast<int>(p.total)});
  record.fitness_inputs = position_summary_json(record.position_scores);
  record.wall_seconds = seconds;
  record.id = store.insert_evaluation(record, samples);
  return from_record(record, false);
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

std::vector<HeldoutEntry> run_heldout(Store& store, std::int64_t experiment_id, const SearchInputs& heldout_inputs) {
  const Intervention best = best_intervention(store, experiment_id);
  std::vector<HeldoutEntry> entries = {{"best", best, {}}, {"baseline", Intervention{}, {}}};
  // PI at the mean scale only means something when the best changes RoPE scales.
  if (!best.rope_scale.empty()) entries.push_back({"pi-mean", pi_at_mean_scale(best), {}});
  if (heldout_inputs.objective != nullptr) {
    if (auto paper = heldout_inputs.objective->paper_default()) {
      // The papers' layer ranges are for 32-layer models; on a shallower one
      // there is no paper default to compare with.
      try {
        heldout_inputs.backend->validate(*paper);
        entries.push_back({"paper-default", *paper, {}});
      } catch (const std::exception& error) {
        std::cerr << "midtune: held-out: no paper-default row (" << error.what() << ")\n";
      }
    }
  }
  for (HeldoutEntry& entry : entries) {
    entry.evaluation = evaluate_on_split(store, heldout_inputs, entry.intervention);
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
