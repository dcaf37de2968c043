// Accuracy by gold position and its summaries (docs/methods.md "Common evaluation
// protocol"), and the LPES bucket fitness (LPES "Fitness").
#pragma once

#include <cstddef>
#include <vector>

namespace midtune::metrics {

struct PositionAccuracy {
  double position = 0.0;  // fraction of the way through the chunks, 0..1
  std::size_t correct = 0;
  std::size_t total = 0;
  double accuracy() const;  // correct / total; throws std::domain_error when total == 0
};

// Counts per position: sample i was shown at positions[position_index[i]].
// Throws std::invalid_argument on mismatched sizes or an index out of range.
std::vector<PositionAccuracy> tally_by_position(const std::vector<double>& positions,
                                                const std::vector<std::size_t>& position_index,
                                                const std::vector<bool>& correct);

struct PositionSummary {
  std::vector<double> accuracy_percent;  // per position, in %
  double mean = 0.0;                     // mean over positions (each weighs the same), %
  double gap = 0.0;                      // best - worst, percentage points
  double std_dev = 0.0;                  // population std across positions, %
  // CALIOPE's U-shape index rho_{delta,a}: with delta = |t - 0.5T| / 0.5T
  // (0 middle, 1 ends; t/T = the position fraction), the population
  // covariance of delta and accuracy in %. Positive = U-shaped.
  double u_shape_covariance = 0.0;
  // Pearson r of the same pairs (0 when either side is constant).
  double u_shape_pearson = 0.0;
};

// Throws std::invalid_argument for no positions or a position with no samples.
PositionSummary summarize(const std::vector<PositionAccuracy>& by_position);

// delta = |f - 0.5| / 0.5 for position fraction f.
double distance_from_middle(double position);

struct BucketWeights {
  double beginning = 0.2;
  double middle = 0.3;
  double end = 0.5;
  // Throws std::invalid_argument unless every weight >= 0 and they sum to 1 (+-1e-9).
  void validate() const;
};

// LPES fitness: lambda_B acc(first position) + lambda_M mean acc(positions
// between) + lambda_E acc(last position), accuracies in [0, 1]. Positions are
// taken in the order given (first = beginning, last = end). Needs >= 3
// positions, or 2 when the middle weight is 0.
double bucket_fitness(const std::vector<PositionAccuracy>& by_position, const BucketWeights& weights);

// The same λ-weighting of any per-position value (e.g. the mean gold
// log-probability): λ_B v_first + λ_M mean(v between) + λ_E v_last, with the
// same position rules as bucket_fitness.
double bucket_weighted(const std::vector<double>& by_position, const BucketWeights& weights);

}  // namespace midtune::metrics
