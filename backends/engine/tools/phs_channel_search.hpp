// The PHS channel search's analysis (docs/methods.md "PHS", paper 001 §3.2,
// Alg. 1 lines 1-14, App. C.1): which hidden-state channels change
// monotonically and smoothly with the token position. It chooses the `phs`
// objective's channel genes and, like every objective, never sees a model
// (pure Eigen, tested alone): the caller (ga-run phs-search) feeds it the
// residual stream averaged over random strings, and ranks the survivors by
// validation loss itself.
//
// Per channel c and layer l in [first_layer, L-2]:
//   y = averaged residual[l][skip_tokens..n-1][c], min-max normalised;
//   monotone  <=> the least-squares cubic fit of y has differences of one
//                 sign at every position (Def. 2.1 via App. C.1);
//   smoothness = sum over p of (second difference of smooth(y))^2 (§3.2,
//                "integral of |h''|^2"; lower is smoother).
// A channel is a candidate when monotone in more than L/4 layers (ε = L/4);
// its smoothness is the minimum (default, as the reference code and
// docs/methods.md) or the mean (the paper's text) over its monotone layers; the
// top_k smoothest are kept (Alg. 1 line 14).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Dense>

namespace midtune::phs {

// The residual stream averaged over samples: [layer][token][channel].
struct LayerCurves {
  int layers = 0;
  int tokens = 0;
  int hidden = 0;
  std::vector<float> values;
  LayerCurves() = default;
  LayerCurves(int layers, int tokens, int hidden);
  float at(int layer, int token, int channel) const {
    return values[(static_cast<std::size_t>(layer) * tokens + token) * hidden + channel];
  }
  float& at(int layer, int token, int channel) {
    return values[(static_cast<std::size_t>(layer) * tokens + token) * hidden + channel];
  }
};

enum class Smoothing { moving_average, savitzky_golay };
enum class LayerAggregate { min, mean };

struct SearchOptions {
  int skip_tokens = 30;  // paper 30; reference code 300 (fit) / 200 (smoothness)
  int first_layer = 2;   // analysed layers: first_layer .. L-2 (Alg. 1, code range(2, L-1))
  int top_k = 10;
  // Paper: sliding-window average of width 100; code: Savitzky-Golay
  // (cubic, window 10; here odd windows only).
  Smoothing smoothing = Smoothing::moving_average;
  int smooth_window = 100;
  LayerAggregate aggregate = LayerAggregate::min;
  // Reference code: only the majority direction's layers count (increasing
  // vs decreasing); paper: any layer whose fit is monotone either way.
  bool same_direction = false;
};

// Throws std::invalid_argument naming the option when the options cannot
// work with `tokens` positions and `layers` layers (too few positions left
// after the skipped prefix and the smoothing window, no analysed layer, ...).
void check_options(const SearchOptions& options, int layers, int tokens);

// Least-squares cubic fits of curves of one length n (>= 4): the thin QR of
// the Vandermonde matrix is computed once, so a fit is two small products.
class CubicFitter {
 public:
  explicit CubicFitter(int points);
  int points() const { return points_; }
  // The fitted values at x = 0..n-1.
  Eigen::VectorXd fitted(std::span<const double> y) const;

 private:
  int points_;
  Eigen::MatrixXd q_;  // n x 4, orthonormal columns spanning 1, x, x^2, x^3
};

// (y - min) / (max - min); empty when the curve is flat (max - min below
// 1e-12 of its magnitude): a constant channel carries no position.
std::vector<double> min_max_normalise(std::span<const double> y);
// +1 when every difference of `fit` is >= 0, -1 when every one is <= 0
// (strictly moving somewhere), 0 otherwise.
int trend_sign(const Eigen::VectorXd& fit);
// Sliding-window mean, 'valid' part only: n - window + 1 values.
std::vector<double> moving_average(std::span<const double> y, int window);
// Savitzky-Golay smoothing with a cubic over an odd window; the first and
// last window/2 points are evaluated on the cubic of the first/last window
// (scipy's mode='interp').
std::vector<double> savitzky_golay(std::span<const double> y, int window);
// Sum of squared second differences of smooth(normalise(y)) (§3.2).
double smoothness(std::span<const double> y, Smoothing smoothing, int window);

struct ChannelScore {
  int channel = 0;
  std::vector<int> monotone_layers;  // analysed layers whose cubic fit is monotone (counted ones)
  int direction = 0;                 // +1 / -1: the direction of most of them
  double smoothness = 0.0;           // aggregate over monotone_layers
};

// Alg. 1 lines 1-14: every channel monotone in more than layers/4 layers,
// smoothest first, at most top_k. Ties keep the lower channel first.
std::vector<ChannelScore> find_candidates(const LayerCurves& curves, const SearchOptions& options);

// Alg. 1 lines 15-21 ordering: ranks (1 = best) by lowest validation loss,
// ties by smoothness then channel. Returns, for each input index, its rank.
std::vector<int> rank_by_loss(const std::vector<ChannelScore>& candidates, const std::vector<double>& losses);

const char* to_string(Smoothing smoothing);
Smoothing smoothing_from_string(const std::string& text);  // throws std::invalid_argument
const char* to_string(LayerAggregate aggregate);
LayerAggregate aggregate_from_string(const std::string& text);

}  // namespace midtune::phs
