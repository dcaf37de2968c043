#include "backends/engine/tools/phs_channel_search.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace midtune::phs {

LayerCurves::LayerCurves(int layers_, int tokens_, int hidden_)
    : layers(layers_), tokens(tokens_), hidden(hidden_),
      values(static_cast<std::size_t>(layers_) * tokens_ * hidden_, 0.0f) {}

namespace {

[[noreturn]] void bad_option(const std::string& option, const std::string& reason) {
  throw std::invalid_argument("phs-search: " + option + ": " + reason);
}

// Points left for the fit after the skipped prefix.
int fit_points(const SearchOptions& o, int tokens) { return tokens - o.skip_tokens; }

// Points the second difference sees after smoothing.
int smoothed_points(const SearchOptions& o, int points) {
  return o.smoothing == Smoothing::moving_average ? points - o.smooth_window + 1 : points;
}

}  // namespace

void check_options(const SearchOptions& o, int layers, int tokens) {
  if (o.top_k < 1) bad_option("top_k", "must be at least 1, got " + std::to_string(o.top_k));
  if (o.skip_tokens < 0) bad_option("skip_tokens", "must be >= 0, got " + std::to_string(o.skip_tokens));
  if (o.smooth_window < 1) bad_option("smooth_window", "must be >= 1, got " + std::to_string(o.smooth_window));
  if (o.smoothing == Smoothing::savitzky_golay && (o.smooth_window % 2 == 0 || o.smooth_window < 5)) {
    bad_option("smooth_window", "Savitzky-Golay needs an odd window of at least 5 (a cubic), got " +
                                    std::to_string(o.smooth_window));
  }
  const int points = fit_points(o, tokens);
  if (points < 8) {
    bad_option("tokens", std::to_string(tokens) + " tokens leave " + std::to_string(points) + " after skipping " +
                             std::to_string(o.skip_tokens) + "; a cubic fit needs at least 8");
  }
  if (o.smooth_window > points || smoothed_points(o, points) < 3) {
    bad_option("smooth_window", "window " + std::to_string(o.smooth_window) + " leaves too few of the " +
                                    std::to_string(points) + " positions after the skipped prefix (need 3 smoothed points)");
  }
  const int last = layers - 2;
  if (o.first_layer < 0 || o.first_layer > last) {
    bad_option("first_layer", "analysed layers " + std::to_string(o.first_layer) + ".." + std::to_string(last) +
                                  " are empty for a " + std::to_string(layers) + "-layer model");
  }
}

CubicFitter::CubicFitter(int points) : points_(points) {
  if (points < 4) throw std::invalid_argument("CubicFitter: a cubic needs at least 4 points, got " + std::to_string(points));
  // x scaled to [-1, 1] keeps the Vandermonde well conditioned; the fitted
  // values do not depend on the scaling.
  Eigen::MatrixXd v(points, 4);
  for (int i = 0; i < points; ++i) {
    const double x = points == 1 ? 0.0 : 2.0 * i / (points - 1) - 1.0;
    v(i, 0) = 1.0;
    v(i, 1) = x;
    v(i, 2) = x * x;
    v(i, 3) = x * x * x;
  }
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(v);
  q_ = qr.householderQ() * Eigen::MatrixXd::Identity(points, 4);
}

Eigen::VectorXd CubicFitter::fitted(std::span<const double> y) const {
  if (static_cast<int>(y.size()) != points_) {
    throw std::invalid_argument("CubicFitter: " + std::to_string(y.size()) + " values for a " +
                                std::to_string(points_) + "-point fit");
  }
  const Eigen::Map<const Eigen::VectorXd> values(y.data(), points_);
  return q_ * (q_.transpose() * values);  // projection onto the cubics
}

std::vector<double> min_max_normalise(std::span<const double> y) {
  if (y.empty()) return {};
  const auto [lo, hi] = std::minmax_element(y.begin(), y.end());
  const double range = *hi - *lo;
  const double magnitude = std::max(std::abs(*hi), std::abs(*lo));
  if (!(range > 1e-12 * std::max(magnitude, 1e-30))) return {};
  std::vector<double> out(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) out[i] = (y[i] - *lo) / range;
  return out;
}

int trend_sign(const Eigen::VectorXd& fit) {
  bool up = true, down = true, moves = false;
  for (Eigen::Index i = 1; i < fit.size(); ++i) {
    const double d = fit[i] - fit[i - 1];
    up = up && d >= 0.0;
    down = down && d <= 0.0;
    moves = moves || d != 0.0;
  }
  if (!moves) return 0;
  return up ? 1 : down ? -1 : 0;
}

std::vector<double> moving_average(std::span<const double> y, int window) {
  const int n = static_cast<int>(y.size());
  if (window < 1 || window > n) {
    throw std::invalid_argument("moving_average: window " + std::to_string(window) + " for " + std::to_string(n) +
                                " values");
  }
  std::vector<double> out(n - window + 1);
  double sum = std::accumulate(y.begin(), y.begin() + window, 0.0);
  out[0] = sum / window;
  for (int i = window; i < n; ++i) {
    sum += y[i] - y[i - window];
    out[i - window + 1] = sum / window;
  }
  return out;
}

std::vector<double> savitzky_golay(std::span<const double> y, int window) {
  const int n = static_cast<int>(y.size());
  if (window < 5 || window % 2 == 0 || window > n) {
    throw std::invalid_argument("savitzky_golay: window " + std::to_string(window) + " must be odd, >= 5 and <= " +
                                std::to_string(n));
  }
  const int half = window / 2;
  const CubicFitter fitter(window);
  std::vector<double> out(n);
  const Eigen::VectorXd head = fitter.fitted(y.subspan(0, window));
  const Eigen::VectorXd tail = fitter.fitted(y.subspan(n - window, window));
  for (int i = 0; i < half; ++i) {
    out[i] = head[i];
    out[n - half + i] = tail[half + 1 + i];
  }
  for (int i = half; i < n - half; ++i) out[i] = fitter.fitted(y.subspan(i - half, window))[half];
  return out;
}

double smoothness(std::span<const double> y, Smoothing smoothing, int window) {
  const std::vector<double> normal = min_max_normalise(y);
  if (normal.empty()) return 0.0;
  const std::vector<double> s =
      smoothing == Smoothing::moving_average ? moving_average(normal, window) : savitzky_golay(normal, window);
  double sum = 0.0;
  for (std::size_t i = 2; i < s.size(); ++i) {
    const double second = s[i] - 2.0 * s[i - 1] + s[i - 2];
    sum += second * second;
  }
  return sum;
}

std::vector<ChannelScore> find_candidates(const LayerCurves& curves, const SearchOptions& options) {
  check_options(options, curves.layers, curves.tokens);
  const int points = curves.tokens - options.skip_tokens;
  const int last_layer = curves.layers - 2;
  const CubicFitter fitter(points);
  std::vector<ChannelScore> kept;
  std::vector<double> y(points);
  for (int c = 0; c < curves.hidden; ++c) {
    std::vector<int> up, down;
    std::vector<double> up_smooth, down_smooth;
    for (int l = options.first_layer; l <= last_layer; ++l) {
      for (int p = 0; p < points; ++p) y[p] = curves.at(l, options.skip_tokens + p, c);
      const std::vector<double> normal = min_max_normalise(y);
      if (normal.empty()) continue;
      const int sign = trend_sign(fitter.fitted(normal));
      if (sign == 0) continue;
      (sign > 0 ? up : down).push_back(l);
      (sign > 0 ? up_smooth : down_smooth).push_back(smoothness(y, options.smoothing, options.smooth_window));
    }
    ChannelScore score;
    score.channel = c;
    // Ties go to decreasing, as in the reference code.
    score.direction = up.size() > down.size() ? 1 : -1;
    std::vector<double> smooth;
    if (options.same_direction) {
      score.monotone_layers = score.direction > 0 ? up : down;
      smooth = score.direction > 0 ? up_smooth : down_smooth;
    } else {
      std::merge(up.begin(), up.end(), down.begin(), down.end(), std::back_inserter(score.monotone_layers));
      smooth = up_smooth;
      smooth.insert(smooth.end(), down_smooth.begin(), down_smooth.end());
    }
    // Alg. 1 line 10: c_t > ε with ε = L/4 (for whole counts, the same as > floor(L/4)).
    if (4 * static_cast<long>(score.monotone_layers.size()) <= curves.layers) continue;
    score.smoothness = options.aggregate == LayerAggregate::min
                           ? *std::min_element(smooth.begin(), smooth.end())
                           : std::accumulate(smooth.begin(), smooth.end(), 0.0) / static_cast<double>(smooth.size());
    kept.push_back(std::move(score));
  }
  std::stable_sort(kept.begin(), kept.end(),
                   [](const ChannelScore& a, const ChannelScore& b) { return a.smoothness < b.smoothness; });
  if (kept.size() > static_cast<std::size_t>(options.top_k)) kept.resize(options.top_k);
  return kept;
}

std::vector<int> rank_by_loss(const std::vector<ChannelScore>& candidates, const std::vector<double>& losses) {
  if (losses.size() != candidates.size()) {
    throw std::invalid_argument("rank_by_loss: " + std::to_string(losses.size()) + " losses for " +
                                std::to_string(candidates.size()) + " candidates");
  }
  std::vector<std::size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (losses[a] != losses[b]) return losses[a] < losses[b];
    if (candidates[a].smoothness != candidates[b].smoothness) return candidates[a].smoothness < candidates[b].smoothness;
    return candidates[a].channel < candidates[b].channel;
  });
  std::vector<int> rank(candidates.size());
  for (std::size_t r = 0; r < order.size(); ++r) rank[order[r]] = static_cast<int>(r) + 1;
  return rank;
}

const char* to_string(Smoothing s) { return s == Smoothing::moving_average ? "moving-average" : "savgol"; }

Smoothing smoothing_from_string(const std::string& text) {
  if (text == "moving-average") return Smoothing::moving_average;
  if (text == "savgol") return Smoothing::savitzky_golay;
  throw std::invalid_argument("phs-search: smoothing '" + text + "' is not one of moving-average, savgol");
}

const char* to_string(LayerAggregate a) { return a == LayerAggregate::min ? "min" : "mean"; }

LayerAggregate aggregate_from_string(const std::string& text) {
  if (text == "min") return LayerAggregate::min;
  if (text == "mean") return LayerAggregate::mean;
  throw std::invalid_argument("phs-search: smoothness aggregate '" + text + "' is not one of min, mean");
}

}  // namespace midtune::phs
