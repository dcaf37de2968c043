#include "objectives/significance.hpp"

#include "core/ga/rng.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace midtune::stats {

Interval wilson_interval(int successes, int trials, double z) {
  if (trials < 0 || successes < 0 || successes > trials)
    throw std::invalid_argument("wilson_interval: need 0 <= successes <= trials, got " + std::to_string(successes) +
                                " of " + std::to_string(trials));
  if (trials == 0) return {0.0, 1.0};
  const double n = trials;
  const double p = successes / n;
  const double z2 = z * z;
  const double denominator = 1.0 + z2 / n;
  const double centre = (p + z2 / (2.0 * n)) / denominator;
  const double half = z / denominator * std::sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n));
  // At 0 or n successes the interval ends at exactly 0 or 1 (float noise
  // would leave 1 - 1e-16).
  return {successes == 0 ? 0.0 : std::max(0.0, centre - half),
          successes == trials ? 1.0 : std::min(1.0, centre + half)};
}

Discordance discordance(const std::vector<PairedOutcome>& items) {
  Discordance d;
  d.total = static_cast<int>(items.size());
  for (const PairedOutcome& item : items) {
    if (item.a && !item.b) ++d.a_only;
    if (item.b && !item.a) ++d.b_only;
  }
  return d;
}

double mcnemar_exact_p(int a_only, int b_only) {
  if (a_only < 0 || b_only < 0) throw std::invalid_argument("mcnemar_exact_p: negative count");
  const int n = a_only + b_only;
  if (n == 0) return 1.0;
  const int k = std::min(a_only, b_only);
  // P(X <= k), X ~ Binomial(n, 1/2), summed in log space so large n cannot overflow.
  double tail = 0.0;
  const double log_half_n = n * std::log(0.5);
  for (int i = 0; i <= k; ++i) {
    tail += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) + log_half_n);
  }
  return std::min(1.0, 2.0 * tail);
}

namespace {

void check_bootstrap_settings(const char* who, int replicates, double confidence) {
  if (replicates < 2) throw std::invalid_argument(std::string(who) + ": need at least 2 replicates");
  if (!(confidence > 0.0 && confidence < 1.0))
    throw std::invalid_argument(std::string(who) + ": confidence must be in (0, 1)");
}

// Percentile interval, nearest-rank on the sorted replicates.
Interval percentile_interval(std::vector<double>& values, double confidence) {
  std::sort(values.begin(), values.end());
  const double tail = (1.0 - confidence) / 2.0;
  const auto rank = [&](double q) {
    const double position = q * static_cast<double>(values.size() - 1);
    return values[static_cast<std::size_t>(std::lround(position))];
  };
  return {rank(tail), rank(1.0 - tail)};
}

}  // namespace

Interval paired_bootstrap(const std::vector<std::vector<PairedOutcome>>& strata, const StrataStatistic& statistic,
                          int replicates, double confidence, std::uint64_t seed) {
  if (strata.empty()) throw std::invalid_argument("paired_bootstrap: no strata");
  for (const auto& stratum : strata)
    if (stratum.empty()) throw std::invalid_argument("paired_bootstrap: a stratum has no items");
  check_bootstrap_settings("paired_bootstrap", replicates, confidence);

  Rng rng(seed);  // the search's own RNG: the same interval for a seed everywhere
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(replicates));
  std::vector<metrics::PositionAccuracy> tally_a(strata.size()), tally_b(strata.size());
  for (int r = 0; r < replicates; ++r) {
    for (std::size_t s = 0; s < strata.size(); ++s) {
      const auto& items = strata[s];
      int correct_a = 0, correct_b = 0;
      for (std::size_t i = 0; i < items.size(); ++i) {
        const PairedOutcome& pick = items[rng.index(items.size())];
        correct_a += pick.a;
        correct_b += pick.b;
      }
      tally_a[s] = {static_cast<double>(s), static_cast<std::size_t>(correct_a), items.size()};
      tally_b[s] = {static_cast<double>(s), static_cast<std::size_t>(correct_b), items.size()};
    }
    values.push_back(statistic(tally_a, tally_b));
  }
  return percentile_interval(values, confidence);
}

Interval mean_bootstrap(const std::vector<double>& differences, int replicates, double confidence, std::uint64_t seed) {
  if (differences.empty()) throw std::invalid_argument("mean_bootstrap: no items");
  check_bootstrap_settings("mean_bootstrap", replicates, confidence);
  Rng rng(seed);
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(replicates));
  for (int r = 0; r < replicates; ++r) {
    double sum = 0.0;
    for (std::size_t i = 0; i < differences.size(); ++i) sum += differences[rng.index(differences.size())];
    values.push_back(sum / static_cast<double>(differences.size()));
  }
  return percentile_interval(values, confidence);
}

double normal_quantile(double p) {
  if (!(p > 0.0 && p < 1.0)) throw std::invalid_argument("normal_quantile: p must be in (0, 1)");
  const auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  double low = -40.0, high = 40.0, x = 0.0;
  for (int i = 0; i < 200 && high - low > 1e-13; ++i) {
    const double error = cdf(x) - p;
    if (error > 0) high = x; else low = x;
    const double density = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    double next = density > 0 ? x - error / density : 0.5 * (low + high);
    if (!(next > low && next < high)) next = 0.5 * (low + high);  // Newton left the bracket: bisect
    if (std::abs(next - x) < 1e-14) return next;
    x = next;
  }
  return x;
}

std::optional<int> mcnemar_items_needed(const Discordance& observed, double power) {
  if (observed.total <= 0 || observed.a_only == observed.b_only) return std::nullopt;
  if (!(power > 0.0 && power < 1.0)) throw std::invalid_argument("mcnemar_items_needed: power must be in (0, 1)");
  const double n = observed.total;
  const double discordant = (observed.a_only + observed.b_only) / n;
  const double difference = (observed.a_only - observed.b_only) / n;
  const double z_alpha = normal_quantile(1.0 - 0.05 / 2.0);
  const double z_beta = normal_quantile(power);
  const double root = z_alpha * std::sqrt(discordant) +
                      z_beta * std::sqrt(std::max(0.0, discordant - difference * difference));
  return static_cast<int>(std::ceil(root * root / (difference * difference)));
}

std::optional<double> mcnemar_detectable_difference(int items, double discordant, double power) {
  if (items <= 0 || !(discordant > 0.0) || discordant > 1.0) return std::nullopt;
  if (!(power > 0.0 && power < 1.0)) throw std::invalid_argument("mcnemar_detectable_difference: power must be in (0, 1)");
  const double z_alpha = normal_quantile(1.0 - 0.05 / 2.0);
  const double z_beta = normal_quantile(power);
  // Items needed at difference d; decreasing in d on (0, p_disc].
  const auto needed = [&](double d) {
    const double root = z_alpha * std::sqrt(discordant) + z_beta * std::sqrt(std::max(0.0, discordant - d * d));
    return root * root / (d * d);
  };
  double high = discordant;  // |d| <= p_disc
  if (needed(high) > items) return std::nullopt;
  double low = 0.0;
  for (int i = 0; i < 100 && high - low > 1e-9; ++i) {
    const double mid = 0.5 * (low + high);
    (needed(mid) > items ? low : high) = mid;
  }
  return high;
}

std::optional<double> pearson(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size())
    throw std::invalid_argument("pearson: " + std::to_string(x.size()) + " x values but " + std::to_string(y.size()) +
                                " y values");
  const auto n = static_cast<double>(x.size());
  if (x.size() < 2) return std::nullopt;
  double mx = 0.0, my = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxy = 0.0, sxx = 0.0, syy = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (!(sxx > 0.0) || !(syy > 0.0)) return std::nullopt;
  return sxy / std::sqrt(sxx * syy);
}

}  // namespace midtune::stats
