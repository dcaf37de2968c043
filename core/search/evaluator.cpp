#include "core/search/evaluator.hpp"

#include <chrono>
#include <optional>
#include <stdexcept>


namespace midtune {

using nlohmann::json;

std::string evaluation_cache_key(const Intervention& intervention, const json& dataset_slice,
                                 const std::string& metric, const ModelIdentity& model) {
  // Sorted keys (nlohmann::json objects are ordered maps) make the text canonical.
  return json{{"intervention", intervention.canonical()},
              {"dataset", dataset_slice},
              {"metric", metric},
              {"model", model.key()}}
      .dump();
}

namespace {

json summary_json(const std::vector<metrics::PositionAccuracy>& by_position) {
  try {
    const metrics::PositionSummary s = metrics::summarize(by_position);
    return {{"mean_percent", s.mean}, {"gap_points", s.gap}, {"std_percent", s.std_dev},
            {"u_shape_covariance", s.u_shape_covariance}, {"u_shape_pearson", s.u_shape_pearson}};
  } catch (const std::invalid_argument&) {
    return json::object();  // a position without samples has no summary
  }
}

std::vector<PositionScore> stored_scores(const std::vector<metrics::PositionAccuracy>& by_position) {
  std::vector<PositionScore> out;
  for (const metrics::PositionAccuracy& p : by_position)
    out.push_back({p.position, p.total ? p.accuracy() : 0.0, static_cast<int>(p.correct), static_cast<int>(p.total)});
  return out;
}

SplitEvaluation from_record(const EvaluationRecord& record, bool cache_hit) {
  return {record.id, record.position_scores, record.fitness_inputs, cache_hit, record.wall_seconds};
}

}  // namespace

std::vector<metrics::PositionAccuracy> position_tallies(const std::vector<PositionScore>& scores) {
  std::vector<metrics::PositionAccuracy> out;
  for (const PositionScore& s : scores)
    out.push_back({s.position, static_cast<std::size_t>(s.correct), static_cast<std::size_t>(s.samples)});
  return out;
}

json position_summary_json(const std::vector<PositionScore>& scores) { return summary_json(position_tallies(scores)); }

Evaluator::Evaluator(const EvaluationInputs& inputs) : in_(inputs), model_(inputs.backend->identity()) {}

std::string Evaluator::cache_key(const Intervention& intervention) const {
  return evaluation_cache_key(intervention, in_.dataset_slice, in_.metric, model_);
}

EvaluationRecord Evaluator::describe(const Intervention& intervention, const std::string& key) const {
  EvaluationRecord record;
  record.cache_key = key;
  record.key_hash = fnv1a_hex(key);
  record.intervention = intervention.to_json().dump();
  record.dataset_slice = in_.dataset_slice.dump();
  record.metric = in_.metric;
  record.model = model_.key();
  return record;
}

NewEvaluation Evaluator::run(const Intervention& intervention, const std::string& key) const {
  in_.backend->validate(intervention);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<SampleOutput> outputs = in_.backend->run(intervention, in_.items, in_.run_options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (outputs.size() != in_.items.size())
    throw BackendError("backend returned " + std::to_string(outputs.size()) + " outputs for " +
                       std::to_string(in_.items.size()) + " prompts");
  NewEvaluation fresh{describe(intervention, key), {}};
  std::vector<bool> correct;
  const bool teacher_forced = in_.run_options.mode == Mode::teacher_forced;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const BatchItem& item = in_.items[i];
    const bool ok = in_.score(i, outputs[i]);
    correct.push_back(ok);
    fresh.samples.push_back({item.id, item.gold_depth, ok, outputs[i].output_text,
                             teacher_forced ? std::optional(outputs[i].gold_logprob) : std::nullopt,
                             outputs[i].prompt_tokens});
  }
  const auto tally = metrics::tally_by_position(in_.gold_positions, in_.position_index, correct);
  fresh.record.position_scores = stored_scores(tally);
  fresh.record.fitness_inputs = summary_json(tally);
  fresh.record.wall_seconds = seconds;
  return fresh;
}

SplitEvaluation Evaluator::evaluate(Store& store, const Intervention& intervention) const {
  const std::string key = cache_key(intervention);
  if (auto cached = store.find_evaluation(key)) return from_record(*cached, true);
  NewEvaluation fresh = run(intervention, key);
  // Another process (a second experiment in the same file) may have stored
  // the same key while the backend ran: its row is the cached result.
  const StoredEvaluation stored = store.cache_evaluation(fresh.record, fresh.samples);
  if (stored.cache_hit) return from_record(*store.evaluation(stored.id), true);
  fresh.record.id = stored.id;
  return from_record(fresh.record, false);
}

SplitEvaluation evaluate_on_split(Store& store, const EvaluationInputs& inputs, const Intervention& intervention) {
  return Evaluator(inputs).evaluate(store, intervention);
}

}  // namespace midtune
