// The statistics a held-out comparison needs to be believed: an interval for
// each accuracy, a paired test and a paired interval for each difference, and
// how many items would have been enough. Two interventions scored on the
// same items are paired: each item is correct or not under each, so the
// comparison uses the items where they disagree (McNemar) and resamples
// items, not accuracies (paired bootstrap).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "objectives/metrics.hpp"

namespace midtune::stats {

// z for a two-sided 95 % interval.
inline constexpr double kZ95 = 1.959963984540054;

struct Interval {
  double low = 0.0;
  double high = 0.0;
};

// Wilson score interval of a proportion with `successes` of `trials`
// (Wilson 1927): centre (p + z²/2n) / (1 + z²/n), half-width
// z / (1 + z²/n) · sqrt(p(1 − p)/n + z²/4n²). {0, 1} for trials == 0.
Interval wilson_interval(int successes, int trials, double z = kZ95);

// One item scored under two interventions.
struct PairedOutcome {
  bool a = false;
  bool b = false;
};

struct Discordance {
  int a_only = 0;  // a correct, b wrong
  int b_only = 0;  // b correct, a wrong
  int total = 0;   // all items
};
Discordance discordance(const std::vector<PairedOutcome>& items);

// Exact two-sided McNemar test: under "no difference" each discordant item is
// a fair coin, so p = min(1, 2 · P(Binomial(b + c, 1/2) <= min(b, c))).
// 1 when there is no discordant item.
double mcnemar_exact_p(int a_only, int b_only);

// Paired bootstrap with strata (one stratum per gold position): a replicate
// resamples the items of every stratum with replacement and evaluates
// `statistic` on the per-stratum tallies of a and of b (in stratum order;
// `position` is the stratum's index). Returns the percentile interval of
// `confidence` (e.g. 0.95) over `replicates` replicates, deterministic for a
// seed. Empty strata are refused.
using StrataStatistic = std::function<double(const std::vector<metrics::PositionAccuracy>& a,
                                             const std::vector<metrics::PositionAccuracy>& b)>;
Interval paired_bootstrap(const std::vector<std::vector<PairedOutcome>>& strata, const StrataStatistic& statistic,
                          int replicates, double confidence, std::uint64_t seed);

// Percentile bootstrap interval of the mean of paired differences (one
// value per item, e.g. the change in an item's gold log-probability):
// `replicates` resamples of the items with replacement, deterministic for a
// seed. An empty list is refused.
Interval mean_bootstrap(const std::vector<double>& differences, int replicates, double confidence, std::uint64_t seed);

// Items per stratum that a two-sided McNemar test at alpha = 0.05 needs to
// detect, with probability `power`, a difference as large as the observed
// one (Connor 1987's approximation from the discordant proportions
// p_disc = (b + c)/n and d = (b − c)/n:
//   n = (z_{α/2} sqrt(p_disc) + z_β sqrt(p_disc − d²))² / d²).
// nullopt when the observed difference is zero (nothing to detect).
std::optional<int> mcnemar_items_needed(const Discordance& observed, double power = 0.8);

// The inverse: the smallest difference |d| (a fraction) that `items` paired
// items detect with probability `power` at alpha = 0.05, at the discordant
// proportion p_disc (the same approximation solved for d by bisection).
// nullopt when p_disc is 0 (no discordance to estimate from) or when even
// d = p_disc (every discordant pair one way) needs more items.
std::optional<double> mcnemar_detectable_difference(int items, double discordant, double power = 0.8);

// Pearson correlation of paired values (with 0/1 on one side: the
// point-biserial correlation); nullopt for fewer than two pairs or a
// constant side. Throws std::invalid_argument on different lengths.
std::optional<double> pearson(const std::vector<double>& x, const std::vector<double>& y);

// Standard normal quantile: Phi(x) = erfc(-x / sqrt 2) / 2 inverted by
// Newton steps from a bisection bracket (to ~1e-12 on (0, 1)).
double normal_quantile(double p);

}  // namespace midtune::stats
