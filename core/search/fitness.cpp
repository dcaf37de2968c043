#include "core/search/fitness.hpp"

#include "core/search/evaluator.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace midtune {

namespace {

// The blend's tie-break scale: below every accuracy step a search can see.
constexpr double kBlendScale = 1e-6;

enum class Part { beginning, middle, end, mean, neg_gap };

struct ParetoObjective {
  const char* name;
  bool logprob;
  Part part;
};

const std::vector<ParetoObjective>& pareto_table() {
  static const std::vector<ParetoObjective> table = {
      {"accuracy_beginning", false, Part::beginning}, {"accuracy_middle", false, Part::middle},
      {"accuracy_end", false, Part::end},             {"accuracy_mean", false, Part::mean},
      {"neg_gap", false, Part::neg_gap},              {"logprob_beginning", true, Part::beginning},
      {"logprob_middle", true, Part::middle},         {"logprob_end", true, Part::end},
      {"logprob_mean", true, Part::mean},             {"logprob_neg_gap", true, Part::neg_gap}};
  return table;
}

const ParetoObjective& pareto_objective(const std::string& name) {
  for (const ParetoObjective& o : pareto_table())
    if (name == o.name) return o;
  std::string known;
  for (const ParetoObjective& o : pareto_table()) known += std::string(known.empty() ? "" : ", ") + o.name;
  throw std::invalid_argument("search.objectives: unknown objective '" + name + "' (expected " + known + ")");
}

double part_of(const std::vector<double>& values, Part part) {
  const std::size_t n = values.size();
  if (n == 0) throw std::invalid_argument("objective: no positions");
  switch (part) {
    case Part::beginning: return values.front();
    case Part::end: return values.back();
    case Part::middle: {
      if (n < 3) throw std::invalid_argument("objective: a middle needs three gold positions or more");
      double sum = 0.0;
      for (std::size_t i = 1; i + 1 < n; ++i) sum += values[i];
      return sum / static_cast<double>(n - 2);
    }
    case Part::mean: {
      double sum = 0.0;
      for (double v : values) sum += v;
      return sum / static_cast<double>(n);
    }
    case Part::neg_gap: {
      const auto [low, high] = std::minmax_element(values.begin(), values.end());
      return -(*high - *low);
    }
  }
  return 0.0;
}

const std::vector<double>& logprobs_of(const PositionOutcomes& outcomes) {
  if (outcomes.mean_gold_logprob.size() != outcomes.accuracy.size())
    throw std::invalid_argument(
        "fitness: the evaluation has no gold log-probability per position (recorded under dataset.metric "
        "teacher_forced only, and only for gold positions at least one chunk apart)");
  return outcomes.mean_gold_logprob;
}

}  // namespace

std::size_t listed_position_of(const std::vector<double>& listed, double gold_depth) {
  std::size_t nearest = 0;
  for (std::size_t p = 1; p < listed.size(); ++p)
    if (std::abs(listed[p] - gold_depth) < std::abs(listed[nearest] - gold_depth)) nearest = p;
  return nearest;
}

PositionOutcomes position_outcomes(const std::vector<PositionScore>& scores, const std::vector<SampleRecord>& samples) {
  PositionOutcomes out;
  out.accuracy = position_tallies(scores);
  if (samples.empty() || scores.empty()) return out;
  std::vector<double> listed;
  for (const PositionScore& score : scores) listed.push_back(score.position);
  std::vector<double> sum(scores.size(), 0.0);
  std::vector<int> count(scores.size(), 0);
  for (const SampleRecord& s : samples) {
    if (!s.gold_logprob) return out;  // not recorded (generate metric): no log-probabilities at all
    const std::size_t nearest = listed_position_of(listed, s.gold_position);
    sum[nearest] += *s.gold_logprob;
    ++count[nearest];
  }
  for (std::size_t p = 0; p < scores.size(); ++p) {
    if (count[p] != scores[p].samples) return out;  // the samples do not match the tallies
    out.mean_gold_logprob.push_back(sum[p] / count[p]);
  }
  return out;
}

const std::vector<std::string>& fitness_kinds() {
  static const std::vector<std::string> kinds = {"accuracy", "gold_logprob", "blend"};
  return kinds;
}

FitnessKind fitness_kind_from_string(const std::string& name) {
  if (name == "accuracy") return FitnessKind::accuracy;
  if (name == "gold_logprob") return FitnessKind::gold_logprob;
  if (name == "blend") return FitnessKind::blend;
  throw std::invalid_argument("objective.fitness: unknown '" + name + "' (expected accuracy, gold_logprob or blend)");
}

bool needs_logprob(FitnessKind kind) { return kind != FitnessKind::accuracy; }
bool needs_logprob(const std::string& objective_name) { return pareto_objective(objective_name).logprob; }

bool SearchScoring::needs_samples() const {
  if (objectives.empty()) return needs_logprob(fitness);
  return std::any_of(objectives.begin(), objectives.end(), [](const std::string& o) { return needs_logprob(o); });
}

double search_fitness(const SearchScoring& scoring, const Objective& objective, const PositionOutcomes& outcomes) {
  if (scoring.fitness == FitnessKind::accuracy) return objective.fitness(outcomes.accuracy);
  const double logprob = metrics::bucket_weighted(logprobs_of(outcomes), scoring.weights);
  if (scoring.fitness == FitnessKind::gold_logprob) return logprob;
  // blend: 1 / (1 - F_lp) maps F_lp in [-inf, 0] monotonically onto [0, 1].
  return objective.fitness(outcomes.accuracy) + kBlendScale / (1.0 - std::min(logprob, 0.0));
}

const std::vector<std::string>& pareto_objective_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const ParetoObjective& o : pareto_table()) out.push_back(o.name);
    return out;
  }();
  return names;
}

std::vector<double> pareto_objectives(const SearchScoring& scoring, const PositionOutcomes& outcomes) {
  std::vector<double> accuracy;
  for (const metrics::PositionAccuracy& p : outcomes.accuracy) accuracy.push_back(p.accuracy());
  std::vector<double> values;
  for (const std::string& name : scoring.objectives) {
    const ParetoObjective& o = pareto_objective(name);
    values.push_back(part_of(o.logprob ? logprobs_of(outcomes) : accuracy, o.part));
  }
  return values;
}

}  // namespace midtune
