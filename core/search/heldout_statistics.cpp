#include "core/search/heldout_statistics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/search/fitness.hpp"
#include "objectives/significance.hpp"

namespace midtune {

using nlohmann::json;

namespace {

constexpr double kConfidence = 0.95;
constexpr double kAlpha = 0.05;

// One listed gold position of a role: its items in sample_id order and where
// their gold actually sat (the chunk nearest the listed fraction: 0.5 of ten
// chunks is chunk 5 of 0..9, depth 0.556).
struct PositionItems {
  std::vector<const SampleRecord*> items;
  double depth_sum = 0.0;
  double realised() const { return depth_sum / static_cast<double>(items.size()); }
};

// Outcomes of one role by listed gold position (the experiment's
// gold_positions, as position_scores names them), so intervals and
// comparisons name a position as the scores do. Rows without scores fall
// back to the stored depths.
std::map<double, PositionItems> by_position(const HeldoutRow& row) {
  std::vector<double> listed;
  for (const json& p : row.position_scores) listed.push_back(p.at("position").get<double>());
  std::map<double, PositionItems> out;
  for (const SampleRecord& s : row.samples) {
    PositionItems& at = out[listed.empty() ? s.gold_position : listed[listed_position_of(listed, s.gold_position)]];
    at.items.push_back(&s);
    at.depth_sum += s.gold_position;
  }
  return out;
}

// "position" is the listed one; "realised_position" (the mean depth of the
// items' gold) stands beside it only where the two differ.
void name_position(json& entry, double position, const PositionItems& at) {
  entry["position"] = position;
  if (std::abs(at.realised() - position) > 1e-9) entry["realised_position"] = at.realised();
}

json interval_json(int correct, int samples) {
  const stats::Interval i = stats::wilson_interval(correct, samples);
  return {{"correct", correct},
          {"samples", samples},
          {"accuracy", samples > 0 ? static_cast<double>(correct) / samples : 0.0},
          {"low", i.low},
          {"high", i.high}};
}

json role_intervals(const HeldoutRow& row) {
  json positions = json::array();
  int correct = 0, samples = 0;
  for (const auto& [position, at] : by_position(row)) {
    const auto& items = at.items;
    const int k = static_cast<int>(std::count_if(items.begin(), items.end(), [](const SampleRecord* s) { return s->correct; }));
    json entry = interval_json(k, static_cast<int>(items.size()));
    name_position(entry, position, at);
    positions.push_back(std::move(entry));
    correct += k;
    samples += static_cast<int>(items.size());
  }
  json pooled = interval_json(correct, samples);
  return {{"role", row.role}, {"positions", positions}, {"pooled", pooled}};
}

std::string signed_points(double points) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f", points);
  return buf;
}

// One paired comparison over the strata `from`..`to` of `strata` (pooled for McNemar).
json paired_part(const std::vector<std::vector<stats::PairedOutcome>>& strata, std::size_t from, std::size_t to,
                 const HeldoutStatisticsOptions& options, std::uint64_t seed) {
  std::vector<stats::PairedOutcome> pooled;
  for (std::size_t s = from; s < to; ++s) pooled.insert(pooled.end(), strata[s].begin(), strata[s].end());
  const stats::Discordance d = stats::discordance(pooled);
  // Mean over the part's positions of (best - other), each position weighing the same.
  const auto mean_difference = [from, to](const std::vector<metrics::PositionAccuracy>& other,
                                          const std::vector<metrics::PositionAccuracy>& best) {
    double sum = 0.0;
    for (std::size_t s = from; s < to; ++s) sum += best[s].accuracy() - other[s].accuracy();
    return sum / static_cast<double>(to - from);
  };
  double observed = 0.0;
  for (std::size_t s = from; s < to; ++s) {
    const stats::Discordance ds = stats::discordance(strata[s]);
    observed += static_cast<double>(ds.b_only - ds.a_only) / ds.total;
  }
  observed /= static_cast<double>(to - from);
  const stats::Interval ci = stats::paired_bootstrap(strata, mean_difference, options.bootstrap_replicates, kConfidence, seed);
  return {{"difference_points", 100.0 * observed},
          {"ci_points", {100.0 * ci.low, 100.0 * ci.high}},
          {"role_only", d.b_only},
          {"against_only", d.a_only},
          {"paired_items", d.total},
          {"mcnemar_p", stats::mcnemar_exact_p(d.a_only, d.b_only)}};
}

json compare(const HeldoutRow& best, const HeldoutRow& other, const HeldoutStatisticsOptions& options) {
  // Pair the two roles' items by sample id, position by position (a = other, b = best;
  // "best" is whichever role is compared, the subject or a reference setting).
  std::map<std::string, const SampleRecord*> other_by_id;
  for (const SampleRecord& s : other.samples) other_by_id[s.sample_id] = &s;
  std::vector<double> positions;
  std::vector<PositionItems> position_items;
  std::vector<std::vector<stats::PairedOutcome>> strata;
  // Per position, the change in each item's gold log-probability (teacher-
  // forced rows only): it moves where the answers do not, e.g. where both
  // roles answer nothing.
  std::vector<std::vector<double>> logprob_changes;
  for (const auto& [position, at] : by_position(best)) {
    std::vector<stats::PairedOutcome> pairs;
    std::vector<double> changes;
    for (const SampleRecord* s : at.items) {
      const auto it = other_by_id.find(s->sample_id);
      if (it == other_by_id.end()) continue;
      pairs.push_back({it->second->correct, s->correct});
      const auto& other_logprob = it->second->gold_logprob;
      if (s->gold_logprob && other_logprob && std::isfinite(*s->gold_logprob) && std::isfinite(*other_logprob))
        changes.push_back(*s->gold_logprob - *other_logprob);
    }
    if (pairs.empty()) continue;
    positions.push_back(position);
    position_items.push_back(at);
    strata.push_back(std::move(pairs));
    logprob_changes.push_back(std::move(changes));
  }
  json out = {{"role", best.role}, {"against", other.role}};
  if (strata.empty()) {
    out["verdict"] = best.role + " vs " + other.role + ": no items in common";
    out["detected"] = false;
    return out;
  }
  json per_position = json::array();
  for (std::size_t s = 0; s < strata.size(); ++s) {
    json part = paired_part(strata, s, s + 1, options, options.bootstrap_seed + s);
    name_position(part, positions[s], position_items[s]);
    per_position.push_back(std::move(part));
  }
  out["positions"] = per_position;
  // The middle: every position between the first and the last (all of them
  // when there are fewer than three).
  const bool has_middle = strata.size() >= 3;
  const std::size_t from = has_middle ? 1 : 0, to = has_middle ? strata.size() - 1 : strata.size();
  json middle = paired_part(strata, from, to, options, options.bootstrap_seed + 1000);
  middle["positions"] = json(std::vector<double>(positions.begin() + from, positions.begin() + to));
  std::vector<double> middle_changes;
  for (std::size_t s = from; s < to; ++s)
    middle_changes.insert(middle_changes.end(), logprob_changes[s].begin(), logprob_changes[s].end());
  if (!middle_changes.empty()) {
    double sum = 0.0;
    for (double change : middle_changes) sum += change;
    const stats::Interval ci =
        stats::mean_bootstrap(middle_changes, options.bootstrap_replicates, kConfidence, options.bootstrap_seed + 3000);
    middle["gold_logprob"] = {{"mean_difference", sum / static_cast<double>(middle_changes.size())},
                              {"ci", {ci.low, ci.high}},
                              {"items", middle_changes.size()}};
  }
  out["middle"] = middle;
  try {
    const auto fitness_difference = [&](const std::vector<metrics::PositionAccuracy>& o,
                                        const std::vector<metrics::PositionAccuracy>& b) {
      return metrics::bucket_fitness(b, options.weights) - metrics::bucket_fitness(o, options.weights);
    };
    std::vector<metrics::PositionAccuracy> o, b;
    for (std::size_t s = 0; s < strata.size(); ++s) {
      const stats::Discordance d = stats::discordance(strata[s]);
      std::size_t other_correct = 0, best_correct = 0;
      for (const auto& pair : strata[s]) {
        other_correct += pair.a;
        best_correct += pair.b;
      }
      o.push_back({positions[s], other_correct, static_cast<std::size_t>(d.total)});
      b.push_back({positions[s], best_correct, static_cast<std::size_t>(d.total)});
    }
    const stats::Interval ci = stats::paired_bootstrap(strata, fitness_difference, options.bootstrap_replicates,
                                                       kConfidence, options.bootstrap_seed + 2000);
    out["fitness"] = {{"difference_points", 100.0 * fitness_difference(o, b)},
                      {"ci_points", {100.0 * ci.low, 100.0 * ci.high}}};
  } catch (const std::invalid_argument&) {
    // Too few positions for the bucket fitness: no fitness row.
  }
  const stats::Discordance basis{middle["against_only"].get<int>(), middle["role_only"].get<int>(),
                                 middle["paired_items"].get<int>()};
  const auto needed = stats::mcnemar_items_needed(basis, options.power);
  const std::size_t basis_positions = to - from;
  out["items_needed_per_position"] =
      needed ? json(static_cast<int>(std::ceil(static_cast<double>(*needed) / basis_positions))) : json(nullptr);
  // What this many middle items can tell apart, at the discordance seen.
  const int middle_items = basis.total;
  const auto detectable = stats::mcnemar_detectable_difference(
      middle_items, middle_items > 0 ? static_cast<double>(basis.a_only + basis.b_only) / middle_items : 0.0,
      options.power);
  out["detectable_points"] = detectable ? json(100.0 * *detectable) : json(nullptr);
  const double p = middle["mcnemar_p"].get<double>();
  const double low = middle["ci_points"][0].get<double>(), high = middle["ci_points"][1].get<double>();
  const bool detected = p < kAlpha && (low > 0.0 || high < 0.0);
  out["detected"] = detected;
  const std::string where = has_middle ? "middle" : "all positions";
  const std::string figures = where + " " + signed_points(middle["difference_points"].get<double>()) +
                              " points, 95 % CI [" + signed_points(low) + ", " + signed_points(high) +
                              "], McNemar p = " + format_p_value(p);
  const std::string power = std::to_string(static_cast<int>(std::lround(100 * options.power))) + " % power";
  std::string verdict = best.role + " vs " + other.role + ": ";
  if (detected) {
    verdict += figures;
  } else {
    verdict += "no difference detected (" + figures;
    if (needed)
      verdict += "; about " + std::to_string(out["items_needed_per_position"].get<int>()) +
                 " items per position would detect a difference this size with " + power;
    verdict += ")";
  }
  if (detectable) {
    char text[96];
    std::snprintf(text, sizeof text, "; %d %s items detect a change of %.1f points with %s", middle_items,
                  where.c_str(), 100.0 * *detectable, power.c_str());
    verdict += text;
  } else if (basis.a_only + basis.b_only == 0) {
    verdict += "; " + std::to_string(middle_items) + " " + where + " items, no discordant pair to size a test from";
  } else {
    verdict += "; " + std::to_string(middle_items) + " " + where + " items are too few to detect any change at " +
               "this discordance with " + power;
  }
  out["verdict"] = verdict;
  return out;
}

// Pearson r between per-sample correctness (0/1) and teacher-forced gold
// log-probability: how well the continuous fitness tracks the accuracy one.
json logprob_correlation(const std::string& role, const std::vector<const SampleRecord*>& samples) {
  std::vector<double> correct, logprob;
  for (const SampleRecord* s : samples) {
    if (!s->gold_logprob || !std::isfinite(*s->gold_logprob)) continue;
    correct.push_back(s->correct ? 1.0 : 0.0);
    logprob.push_back(*s->gold_logprob);
  }
  const auto r = stats::pearson(correct, logprob);
  return {{"role", role}, {"samples", correct.size()}, {"pearson_r", r ? json(*r) : json(nullptr)}};
}

}  // namespace

json heldout_statistics(const std::vector<HeldoutRow>& rows, const HeldoutStatisticsOptions& options) {
  json out = {{"confidence", kConfidence},
              {"bootstrap_replicates", options.bootstrap_replicates},
              {"intervals", json::array()},
              {"comparisons", json::array()}};
  const HeldoutRow* best = nullptr;
  for (const HeldoutRow& row : rows) {
    out["intervals"].push_back(role_intervals(row));
    if (row.role == options.subject_role) best = &row;
  }
  if (best)
    for (const HeldoutRow& row : rows)
      if (&row != best && row.split == best->split) out["comparisons"].push_back(compare(*best, row, options));
  // A reference setting (the paper's default, PI at the best's mean scale)
  // against the plain model too: whether the paper's own setting moves this
  // model is the first question a reader of the row asks. Pareto front
  // members are left out: they are the search's, not a reference.
  const auto baseline =
      std::find_if(rows.begin(), rows.end(), [](const HeldoutRow& r) { return r.role == "baseline"; });
  if (baseline != rows.end())
    for (const HeldoutRow& row : rows)
      if (&row != best && &row != &*baseline && row.split == baseline->split && row.role.rfind("front-", 0) != 0)
        out["comparisons"].push_back(compare(row, *baseline, options));
  // Only teacher-forced evaluations record a log-probability.
  std::vector<const SampleRecord*> all;
  json correlations = json::array();
  for (const HeldoutRow& row : rows) {
    std::vector<const SampleRecord*> samples;
    for (const SampleRecord& s : row.samples) samples.push_back(&s);
    json c = logprob_correlation(row.role, samples);
    if (c["samples"].get<std::size_t>() == 0) continue;
    correlations.push_back(std::move(c));
    all.insert(all.end(), samples.begin(), samples.end());
  }
  if (!correlations.empty()) {
    correlations.push_back(logprob_correlation("all roles", all));
    out["logprob_correlation"] = correlations;
  }
  return out;
}

std::vector<std::string> heldout_verdicts(const json& statistics) {
  std::vector<std::string> lines;
  for (const json& c : statistics.value("comparisons", json::array())) lines.push_back(c.value("verdict", ""));
  return lines;
}

std::string format_p_value(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, p < 0.001 ? "%.1e" : "%.3f", p);
  return buf;
}

}  // namespace midtune
