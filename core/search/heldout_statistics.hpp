// How much a held-out table can be believed: a 95 % Wilson interval for every
// accuracy, and for the best intervention against every other role (the
// baseline, PI at the mean scale, the paper default), and for each reference
// setting (PI, the paper default) against the baseline, the paired comparison on
// the same items — the exact McNemar test and a paired bootstrap interval of
// the difference per position, in the middle and for the λ-weighted fitness
// (LPES eq. 9) — with a one-line verdict and the items per position a
// difference of the observed size would need (80 % power).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "objectives/metrics.hpp"
#include "schema/store.hpp"

namespace midtune {

struct HeldoutStatisticsOptions {
  metrics::BucketWeights weights;
  int bootstrap_replicates = 2000;
  std::uint64_t bootstrap_seed = 1;  // fixed: a report reads the same every time
  double power = 0.8;
  // The role compared against every other role on the same split.
  std::string subject_role = "best";
};

// {"confidence", "bootstrap_replicates", "intervals": [{role, positions:
// [{position, correct, samples, accuracy, low, high}], pooled: {...}}],
// "comparisons": [{role, against, paired_items, positions: [{position,
// difference_points, ci_points, role_only, against_only, mcnemar_p}], middle
// (as a position, plus gold_logprob: {mean_difference, ci, items} where both
// rows are teacher-forced: the paired change in the gold log-probability),
// fitness: {difference_points, ci_points}, items_needed_per_position,
// detected, verdict}], "logprob_correlation": [{role, samples, pearson_r}]
// (per role and "all roles"; absent without teacher-forced
// log-probabilities)}. Accuracies and intervals in [0, 1], differences in
// percentage points (role minus against; role_only: items only role answers).
nlohmann::json heldout_statistics(const std::vector<HeldoutRow>& rows, const HeldoutStatisticsOptions& options);

// The verdict lines of heldout_statistics(), one per comparison.
std::vector<std::string> heldout_verdicts(const nlohmann::json& statistics);

// A p-value as the verdicts and the reports print it: three decimals, or
// two significant digits below 0.001 (a fixed "0.000" would hide how small).
std::string format_p_value(double p);

}  // namespace midtune
