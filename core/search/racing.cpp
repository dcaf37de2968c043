#include "core/search/racing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "methods/intervention.hpp"

namespace midtune {

namespace {

// Continued fraction of the regularized incomplete beta function (modified
// Lentz; Press et al., Numerical Recipes, "betacf").
double beta_continued_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  constexpr double kEpsilon = 1e-15;
  const auto guard = [](double v) { return std::fabs(v) < kTiny ? kTiny : v; };
  double c = 1.0;
  double d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a - 1.0 + m2) * (a + m2));
    d = 1.0 / guard(1.0 + aa * d);
    c = guard(1.0 + aa / c);
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2));
    d = 1.0 / guard(1.0 + aa * d);
    c = guard(1.0 + aa / c);
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1.0) < kEpsilon) break;
  }
  return h;
}

// I_x(a, b).
double regularized_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                                b * std::log1p(-x));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_continued_fraction(a, b, x) / a;
  return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b;
}

// P(T_df <= t) for t >= 0: 1 − I_{df/(df+t²)}(df/2, 1/2) / 2.
double student_t_cdf_upper_half(double t, int df) {
  const double nu = static_cast<double>(df);
  return 1.0 - 0.5 * regularized_beta(nu / 2.0, 0.5, nu / (nu + t * t));
}

}  // namespace

double student_t_quantile(double p, int degrees_of_freedom) {
  if (!(p > 0.0 && p < 1.0)) throw std::invalid_argument("student_t_quantile: p must be in (0, 1)");
  if (degrees_of_freedom < 1) throw std::invalid_argument("student_t_quantile: degrees of freedom must be >= 1");
  if (p < 0.5) return -student_t_quantile(1.0 - p, degrees_of_freedom);
  if (p == 0.5) return 0.0;
  // Every bound of one look asks for the same quantile, and the bisection
  // below was a fifth of an MPI driver's CPU time in a racing search: the
  // last answer is kept (the same value, so every decision is unchanged).
  thread_local double last_p = 0.0, last_quantile = 0.0;
  thread_local int last_df = 0;
  if (p == last_p && degrees_of_freedom == last_df) return last_quantile;
  double low = 0.0, high = 1.0;
  while (student_t_cdf_upper_half(high, degrees_of_freedom) < p) high *= 2.0;
  for (int i = 0; i < 200 && high - low > 1e-13 * high; ++i) {
    const double mid = 0.5 * (low + high);
    (student_t_cdf_upper_half(mid, degrees_of_freedom) < p ? low : high) = mid;
  }
  last_p = p;
  last_df = degrees_of_freedom;
  last_quantile = 0.5 * (low + high);
  return last_quantile;
}

std::vector<std::vector<std::size_t>> race_units(const std::vector<std::size_t>& position_index,
                                                 std::size_t positions, const std::vector<std::string>& keys) {
  if (!keys.empty() && keys.size() != position_index.size())
    throw std::invalid_argument("racing: " + std::to_string(keys.size()) + " unit keys for " +
                                std::to_string(position_index.size()) + " items");
  std::vector<std::vector<std::size_t>> by_position(positions);
  for (std::size_t i = 0; i < position_index.size(); ++i) {
    if (position_index[i] >= positions) throw std::invalid_argument("racing: an item's position index is out of range");
    by_position[position_index[i]].push_back(i);
  }
  const std::size_t count = by_position.empty() ? 0 : by_position.front().size();
  for (std::size_t p = 0; p < positions; ++p) {
    if (by_position[p].size() != count)
      throw std::invalid_argument("racing needs the same number of search items at every gold position (position " +
                                  std::to_string(p) + " has " + std::to_string(by_position[p].size()) + ", position 0 has " +
                                  std::to_string(count) + ")");
    std::vector<std::pair<std::string, std::size_t>> order;
    for (std::size_t i : by_position[p])
      order.push_back({fnv1a_hex(keys.empty() ? std::to_string(i) : keys[i]), i});
    std::sort(order.begin(), order.end());
    for (std::size_t k = 0; k < order.size(); ++k) by_position[p][k] = order[k].second;
  }
  std::vector<std::vector<std::size_t>> units(count);
  for (std::size_t k = 0; k < count; ++k)
    for (std::size_t p = 0; p < positions; ++p) units[k].push_back(by_position[p][k]);
  return units;
}

std::vector<std::size_t> race_schedule(const RaceSettings& settings, std::size_t units) {
  if (settings.first < 1 || settings.step < 1) throw std::invalid_argument("racing: first and step must be >= 1");
  std::vector<std::size_t> ends;
  for (std::size_t m = static_cast<std::size_t>(settings.first); m < units; m += static_cast<std::size_t>(settings.step))
    ends.push_back(m);
  ends.push_back(units);
  return ends;
}

std::size_t race_looks(const std::vector<std::size_t>& schedule, std::size_t units) {
  return static_cast<std::size_t>(
      std::count_if(schedule.begin(), schedule.end(), [&](std::size_t m) { return m >= 2 && m < units; }));
}

std::vector<double> position_weights(const metrics::BucketWeights& weights, std::size_t positions) {
  if (positions < 2) throw std::invalid_argument("racing: the fitness needs at least two gold positions");
  std::vector<double> w(positions, positions > 2 ? weights.middle / static_cast<double>(positions - 2) : 0.0);
  w.front() = weights.beginning;
  w.back() = weights.end;
  return w;
}

RaceBound race_bound(const std::vector<double>& differences, std::size_t units, double confidence, std::size_t looks,
                     double margin) {
  const std::size_t m = differences.size();
  if (m < 2 || m >= units) throw std::invalid_argument("racing: a bound needs 2 <= m < n units");
  if (!(confidence > 0.5 && confidence < 1.0)) throw std::invalid_argument("racing: confidence must be in (0.5, 1)");
  const double mean = std::accumulate(differences.begin(), differences.end(), 0.0) / static_cast<double>(m);
  double squares = 0.0;
  for (double d : differences) squares += (d - mean) * (d - mean);
  const double sd = std::sqrt(squares / static_cast<double>(m - 1));
  const double alpha = (1.0 - confidence) / static_cast<double>(std::max<std::size_t>(looks, 1));
  const double t = student_t_quantile(1.0 - alpha, static_cast<int>(m - 1));
  const double fpc = std::sqrt(1.0 - static_cast<double>(m) / static_cast<double>(units));
  RaceBound bound;
  bound.mean = mean;
  bound.upper = mean + t * sd / std::sqrt(static_cast<double>(m)) * fpc;
  bound.drop = bound.upper + margin < 0.0;
  return bound;
}

std::vector<double> race_unit_values(const std::vector<std::vector<std::size_t>>& units, std::size_t m,
                                     const std::vector<double>& weights, const std::vector<std::size_t>& position_index,
                                     const std::vector<const SampleRecord*>& samples, FitnessKind fitness) {
  const auto value = [&](const SampleRecord* sample, std::size_t item) {
    if (sample == nullptr) throw std::logic_error("racing: item " + std::to_string(item) + " has no stored result");
    if (fitness != FitnessKind::gold_logprob) return sample->correct ? 1.0 : 0.0;
    if (!sample->gold_logprob)
      throw std::invalid_argument("racing: sample '" + sample->sample_id + "' has no gold log-probability");
    return *sample->gold_logprob;
  };
  std::vector<double> out;
  for (std::size_t k = 0; k < m && k < units.size(); ++k) {
    double y = 0.0;
    for (std::size_t item : units[k]) y += weights.at(position_index.at(item)) * value(samples.at(item), item);
    out.push_back(y);
  }
  return out;
}

std::vector<bool> race_drops(const std::vector<RaceContender>& contenders, int parents, std::size_t units,
                             double confidence, std::size_t looks, double margin) {
  if (parents < 1) throw std::invalid_argument("racing: a race needs at least one parent place");
  const auto better = [&](std::size_t i, std::size_t j) {  // j better than i by the bound
    const std::vector<double>& a = contenders[i].values;
    const std::vector<double>& b = contenders[j].values;
    if (a.size() != b.size()) throw std::invalid_argument("racing: contenders of one look have different slices");
    std::vector<double> d(a.size());
    for (std::size_t k = 0; k < a.size(); ++k) d[k] = a[k] - b[k];
    return race_bound(d, units, confidence, looks, margin).drop;
  };
  std::vector<bool> drop(contenders.size(), false);
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    if (!contenders[i].may_drop) continue;
    const int sibling = contenders[i].sibling;
    if (sibling >= static_cast<int>(contenders.size()) || sibling == static_cast<int>(i))
      throw std::invalid_argument("racing: contender " + std::to_string(i) + " names sibling " + std::to_string(sibling));
    if (sibling >= 0 && better(i, static_cast<std::size_t>(sibling))) {
      drop[i] = true;
      continue;
    }
    int beaten_by = 0;
    for (std::size_t j = 0; j < contenders.size() && beaten_by < parents; ++j)
      if (j != i && better(i, j)) ++beaten_by;
    drop[i] = beaten_by >= parents;
  }
  return drop;
}

double race_margin(FitnessKind fitness) { return fitness == FitnessKind::blend ? 1e-6 : 0.0; }

}  // namespace midtune
