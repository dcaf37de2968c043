#include "objectives/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace midtune::metrics {

double PositionAccuracy::accuracy() const {
  if (total == 0) throw std::domain_error("no samples at position " + std::to_string(position));
  return static_cast<double>(correct) / static_cast<double>(total);
}

std::vector<PositionAccuracy> tally_by_position(const std::vector<double>& positions,
                                                const std::vector<std::size_t>& position_index,
                                                const std::vector<bool>& correct) {
  if (position_index.size() != correct.size()) {
    throw std::invalid_argument("tally_by_position: " + std::to_string(position_index.size()) +
                                " position indices but " + std::to_string(correct.size()) + " results");
  }
  std::vector<PositionAccuracy> tallies;
  for (double position : positions) tallies.push_back({position, 0, 0});
  for (std::size_t i = 0; i < correct.size(); ++i) {
    if (position_index[i] >= tallies.size()) {
      throw std::invalid_argument("tally_by_position: sample " + std::to_string(i) + " has position index " +
                                  std::to_string(position_index[i]) + " of " + std::to_string(tallies.size()));
    }
    auto& tally = tallies[position_index[i]];
    ++tally.total;
    tally.correct += correct[i] ? 1 : 0;
  }
  return tallies;
}

double distance_from_middle(double position) { return std::abs(position - 0.5) / 0.5; }

PositionSummary summarize(const std::vector<PositionAccuracy>& by_position) {
  if (by_position.empty()) throw std::invalid_argument("summarize: no positions");
  PositionSummary summary;
  const auto n = static_cast<double>(by_position.size());
  double delta_mean = 0.0;
  for (const auto& position : by_position) {
    summary.accuracy_percent.push_back(100.0 * position.accuracy());
    delta_mean += distance_from_middle(position.position) / n;
  }
  const auto& acc = summary.accuracy_percent;
  for (double a : acc) summary.mean += a / n;
  const auto [worst, best] = std::minmax_element(acc.begin(), acc.end());
  summary.gap = *best - *worst;
  double acc_var = 0.0;
  double delta_var = 0.0;
  double covariance = 0.0;
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const double da = acc[i] - summary.mean;
    const double dd = distance_from_middle(by_position[i].position) - delta_mean;
    acc_var += da * da / n;
    delta_var += dd * dd / n;
    covariance += da * dd / n;
  }
  summary.std_dev = std::sqrt(acc_var);
  summary.u_shape_covariance = covariance;  // CALIOPE rho_{delta,a}
  summary.u_shape_pearson = (acc_var > 0.0 && delta_var > 0.0) ? covariance / std::sqrt(acc_var * delta_var) : 0.0;
  return summary;
}

void BucketWeights::validate() const {
  for (const auto& [name, value] : {std::pair{"beginning", beginning}, {"middle", middle}, {"end", end}}) {
    if (!(value >= 0.0)) {
      throw std::invalid_argument(std::string("objective.weights.") + name + ": must be >= 0, got " +
                                  std::to_string(value));
    }
  }
  const double sum = beginning + middle + end;
  if (std::abs(sum - 1.0) > 1e-9) {
    throw std::invalid_argument("objective.weights: beginning + middle + end must be 1, got " + std::to_string(sum));
  }
}

namespace {
void require_buckets(std::size_t n, const BucketWeights& weights) {
  weights.validate();
  if (n < 2 || (n == 2 && weights.middle > 0.0)) {
    throw std::invalid_argument("bucket fitness needs a beginning, a middle and an end position; got " +
                                std::to_string(n) + " positions");
  }
}
}  // namespace

double bucket_weighted(const std::vector<double>& by_position, const BucketWeights& weights) {
  require_buckets(by_position.size(), weights);
  const std::size_t n = by_position.size();
  double middle = 0.0;
  for (std::size_t i = 1; i + 1 < n; ++i) middle += by_position[i] / static_cast<double>(n - 2);
  // LPES fitness: lambda_B v_B + lambda_M v_M + lambda_E v_E.
  return weights.beginning * by_position.front() + weights.middle * middle + weights.end * by_position.back();
}

double bucket_fitness(const std::vector<PositionAccuracy>& by_position, const BucketWeights& weights) {
  require_buckets(by_position.size(), weights);
  std::vector<double> accuracy;
  for (const PositionAccuracy& p : by_position) accuracy.push_back(p.accuracy());
  return bucket_weighted(accuracy, weights);
}

}  // namespace midtune::metrics
