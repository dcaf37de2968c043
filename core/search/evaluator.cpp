#include "core/search/evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
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
  // A position without samples (a partial row) has no summary.
  for (const metrics::PositionAccuracy& p : by_position)
    if (p.total == 0) return json::object();
  try {
    const metrics::PositionSummary s = metrics::summarize(by_position);
    return {{"mean_percent", s.mean}, {"gap_points", s.gap}, {"std_percent", s.std_dev},
            {"u_shape_covariance", s.u_shape_covariance}, {"u_shape_pearson", s.u_shape_pearson}};
  } catch (const std::invalid_argument&) {
    return json::object();
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

Evaluator::Evaluator(const EvaluationInputs& inputs) : in_(inputs), model_(inputs.backend->identity()) {
  for (std::size_t i = 0; i < in_.items.size(); ++i) index_of_.emplace(in_.items[i].id, i);
}

std::size_t Evaluator::item_index(const std::string& sample_id) const {
  const auto found = index_of_.find(sample_id);
  if (found == index_of_.end())
    throw std::invalid_argument("stored sample '" + sample_id + "' is not an item of this split");
  return found->second;
}

SampleRecord Evaluator::sample_record(std::size_t index, const SampleOutput& output) const {
  const BatchItem& item = in_.items[index];
  const bool teacher_forced = in_.run_options.mode == Mode::teacher_forced;
  return {item.id,
          item.gold_depth,
          in_.score(index, output),
          output.output_text,
          teacher_forced ? std::optional(output.gold_logprob) : std::nullopt,
          output.prompt_tokens};
}

namespace {

void check_output_count(const RunJobResult& result, std::size_t prompts) {
  if (result.error) std::rethrow_exception(result.error);
  if (result.outputs.size() != prompts)
    throw BackendError("backend returned " + std::to_string(result.outputs.size()) + " outputs for " +
                       std::to_string(prompts) + " prompts");
}

// One job run alone, timed as run_each times it.
RunJobResult run_alone(Backend& backend, const RunJob& job, const RunOptions& options) {
  RunJobResult result;
  const auto start = std::chrono::steady_clock::now();
  result.outputs = backend.run(*job.intervention, *job.batch, options);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

RunJob Evaluator::job(const Intervention& intervention, const std::vector<std::size_t>& items) const {
  // The split's own items, not a copy: the inputs outlive every run.
  if (items == all_items()) return {&intervention, {&in_.items, [](const std::vector<BatchItem>*) {}}};
  auto batch = std::make_shared<std::vector<BatchItem>>();
  batch->reserve(items.size());
  for (std::size_t i : items) batch->push_back(in_.items.at(i));
  return {&intervention, std::move(batch)};
}

std::vector<std::size_t> Evaluator::all_items() const {
  std::vector<std::size_t> items(in_.items.size());
  for (std::size_t i = 0; i < items.size(); ++i) items[i] = i;
  return items;
}

std::vector<std::size_t> Evaluator::missing_items(const std::vector<SampleRecord>& samples) const {
  std::vector<bool> have(in_.items.size(), false);
  for (const SampleRecord& s : samples) have[item_index(s.sample_id)] = true;
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < have.size(); ++i)
    if (!have[i]) missing.push_back(i);
  return missing;
}

std::vector<SampleRecord> Evaluator::scored_items(const std::vector<std::size_t>& indices,
                                                  const RunJobResult& result) const {
  check_output_count(result, indices.size());
  std::vector<SampleRecord> samples;
  for (std::size_t k = 0; k < indices.size(); ++k) samples.push_back(sample_record(indices[k], result.outputs[k]));
  return samples;
}

std::vector<SampleRecord> Evaluator::run_items(const Intervention& intervention, const std::vector<std::size_t>& indices,
                                               double& seconds, const PrefetchedRun* ahead) const {
  if (indices.empty()) return {};
  if (ahead != nullptr && ahead->items == indices) {
    seconds += ahead->result.seconds;
    return scored_items(indices, ahead->result);
  }
  in_.backend->validate(intervention);
  const RunJobResult result = run_alone(*in_.backend, job(intervention, indices), in_.run_options);
  seconds += result.seconds;
  return scored_items(indices, result);
}

SampleSummary Evaluator::summarise(const std::vector<SampleRecord>& samples) const {
  std::vector<std::size_t> positions;
  std::vector<bool> correct;
  std::vector<bool> seen(in_.items.size(), false);
  for (const SampleRecord& s : samples) {
    const std::size_t i = item_index(s.sample_id);
    seen[i] = true;
    positions.push_back(in_.position_index[i]);
    correct.push_back(s.correct);
  }
  const auto tally = metrics::tally_by_position(in_.gold_positions, positions, correct);
  return {stored_scores(tally), summary_json(tally), std::all_of(seen.begin(), seen.end(), [](bool b) { return b; })};
}

ExtendedEvaluation Evaluator::complete_partial(Store& store, std::optional<std::int64_t> run_id,
                                               const Intervention& intervention, const std::string& key,
                                               const std::vector<SampleRecord>& samples,
                                               const Store::IndividualOf& individual,
                                               const PrefetchedRun* ahead) const {
  EvaluationRecord record = describe(intervention, key);
  const std::vector<SampleRecord> fresh = run_items(intervention, missing_items(samples), record.wall_seconds, ahead);
  return store.add_samples(
      run_id, record, fresh, [this](const std::vector<SampleRecord>& all) { return summarise(all); }, individual);
}

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

NewEvaluation Evaluator::run(const Intervention& intervention, const std::string& key,
                             const PrefetchedRun* ahead) const {
  if (ahead != nullptr && ahead->items == all_items()) return scored(intervention, key, ahead->result);
  in_.backend->validate(intervention);
  return scored(intervention, key, run_alone(*in_.backend, job(intervention, all_items()), in_.run_options));
}

NewEvaluation Evaluator::scored(const Intervention& intervention, const std::string& key,
                                const RunJobResult& result) const {
  check_output_count(result, in_.items.size());
  NewEvaluation fresh{describe(intervention, key), {}};
  std::vector<bool> correct;
  for (std::size_t i = 0; i < result.outputs.size(); ++i) {
    fresh.samples.push_back(sample_record(i, result.outputs[i]));
    correct.push_back(fresh.samples.back().correct);
  }
  const auto tally = metrics::tally_by_position(in_.gold_positions, in_.position_index, correct);
  fresh.record.position_scores = stored_scores(tally);
  fresh.record.fitness_inputs = summary_json(tally);
  fresh.record.wall_seconds = result.seconds;
  return fresh;
}

std::vector<std::size_t> Evaluator::items_to_run(Store& store, const std::string& key) const {
  if (store.find_evaluation(key)) return {};
  if (const auto partial = store.find_partial_evaluation(key)) return missing_items(store.evaluation_samples(partial->id));
  return all_items();
}

bool Evaluator::plan_run(RunPlan& plan, std::size_t work, const Intervention& intervention, const std::string& key,
                         std::vector<std::size_t> items, bool speculative) const {
  std::set<std::string>& keys = speculative ? plan.speculative_keys : plan.keys;
  if (items.empty() || keys.count(key) > 0) return true;
  if (!speculative && !plan.speculative_keys.empty())
    throw std::logic_error("plan_run: a run planned after a speculative one");
  try {
    in_.backend->validate(intervention);
  } catch (const std::invalid_argument&) {
    return false;
  }
  keys.insert(key);
  plan.jobs.push_back(job(intervention, items));
  plan.jobs.back().speculative = speculative;
  plan.owner.push_back(work);
  plan.items.push_back(std::move(items));
  return true;
}

void run_in_order(Backend& backend, const RunOptions& options, const RunPlan& plan, std::size_t count,
                  const std::function<void(std::size_t, const PrefetchedRun*)>& handle,
                  const std::atomic<int>* stop) {
  std::size_t next = 0;
  backend.run_each(
      plan.jobs, options,
      [&](std::size_t job, RunJobResult result) {
        if (plan.jobs[job].speculative) throw std::logic_error("run_each handed over a speculative job");
        PrefetchedRun ahead{plan.items[job], std::move(result)};
        for (; next < plan.owner[job]; ++next) handle(next, nullptr);
        handle(next++, &ahead);
      },
      stop);
  if (stop_requested(stop) && next < count) throw RunStopped("before the next evaluation");
  for (; next < count; ++next) handle(next, nullptr);
}

void Evaluator::evaluate_all(Store& store, const std::vector<Intervention>& interventions,
                             const std::function<void(std::size_t, SplitEvaluation)>& stored) const {
  RunPlan plan;
  for (std::size_t i = 0; i < interventions.size(); ++i) {
    const std::string key = cache_key(interventions[i]);
    std::vector<std::size_t> items = items_to_run(store, key);
    // Not handed over together: evaluate() runs it in stored slices in its
    // turn, so a stop loses one slice, not the whole evaluation.
    if (runs_in_slices(items.size())) continue;
    if (!plan_run(plan, i, interventions[i], key, std::move(items))) break;
  }
  run_in_order(
      *in_.backend, in_.run_options, plan, interventions.size(),
      [&](std::size_t i, const PrefetchedRun* ahead) { stored(i, evaluate(store, interventions[i], ahead)); },
      in_.stop_signal);
}

SplitEvaluation Evaluator::evaluate(Store& store, const Intervention& intervention, const PrefetchedRun* ahead) const {
  const std::string key = cache_key(intervention);
  if (auto cached = store.find_evaluation(key)) return from_record(*cached, true);
  if (auto partial = store.find_partial_evaluation(key)) {
    const std::vector<SampleRecord> samples = store.evaluation_samples(partial->id);
    if (ahead == nullptr && runs_in_slices(in_.items.size() - samples.size()))
      return complete_in_slices(store, intervention, key, samples);
    const ExtendedEvaluation done = complete_partial(store, std::nullopt, intervention, key, samples, {}, ahead);
    SplitEvaluation out = from_record(*store.evaluation(done.id), done.was_complete);
    out.resumed_samples = done.was_complete ? 0 : samples.size();
    return out;
  }
  if (ahead == nullptr && runs_in_slices(in_.items.size())) return complete_in_slices(store, intervention, key, {});
  NewEvaluation fresh = run(intervention, key, ahead);
  // Another process (a second experiment in the same file) may have stored
  // the same key while the backend ran: its row is the cached result.
  const StoredEvaluation stored = store.cache_evaluation(fresh.record, fresh.samples);
  if (stored.cache_hit) return from_record(*store.evaluation(stored.id), true);
  fresh.record.id = stored.id;
  return from_record(fresh.record, false);
}

bool Evaluator::runs_in_slices(std::size_t items) const {
  return in_.stored_slice_items > 0 && items > in_.stored_slice_items;
}

SplitEvaluation Evaluator::complete_in_slices(Store& store, const Intervention& intervention, const std::string& key,
                                              const std::vector<SampleRecord>& samples) const {
  in_.backend->validate(intervention);
  // Every position in turn (the first missing item of each, then the
  // second...), so that a stopped evaluation leaves a row of every position.
  std::vector<std::size_t> missing = missing_items(samples);
  std::vector<std::size_t> rank(missing.size()), seen(in_.gold_positions.size(), 0);
  for (std::size_t k = 0; k < missing.size(); ++k) rank[k] = seen[in_.position_index[missing[k]]]++;
  std::vector<std::size_t> order(missing.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rank[a] < rank[b]; });
  for (std::size_t& k : order) k = missing[k];
  missing = std::move(order);
  const EvaluationRecord described = describe(intervention, key);
  std::int64_t id = -1;
  for (std::size_t start = 0; start < missing.size(); start += in_.stored_slice_items) {
    if (stop_requested(in_.stop_signal)) {
      throw RunStopped("with " + std::to_string(samples.size() + start) + " of " + std::to_string(in_.items.size()) +
                       " prompts of an evaluation stored");
    }
    const std::size_t end = std::min(missing.size(), start + in_.stored_slice_items);
    const std::vector<std::size_t> slice(missing.begin() + static_cast<std::ptrdiff_t>(start),
                                         missing.begin() + static_cast<std::ptrdiff_t>(end));
    EvaluationRecord record = described;
    record.wall_seconds = 0.0;  // this slice's; add_samples adds it to the row's
    const std::vector<SampleRecord> fresh = run_items(intervention, slice, record.wall_seconds);
    const ExtendedEvaluation done = store.add_samples(
        std::nullopt, record, fresh, [this](const std::vector<SampleRecord>& all) { return summarise(all); });
    // Another process finished the row while this slice ran: its row is the
    // cached result.
    if (done.was_complete) return from_record(*store.evaluation(done.id), true);
    id = done.id;
  }
  SplitEvaluation out = from_record(*store.evaluation(id), false);
  out.resumed_samples = samples.size();
  return out;
}

SplitEvaluation evaluate_on_split(Store& store, const EvaluationInputs& inputs, const Intervention& intervention) {
  return Evaluator(inputs).evaluate(store, intervention);
}

}  // namespace midtune
