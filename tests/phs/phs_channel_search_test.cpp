// The PHS channel-search analysis on synthetic curves whose answer is known
// (backends/engine/tools/phs_channel_search.hpp): monotone smooth channels are found,
// noisy or non-monotone ones are not, smoother ranks first, the > L/4 rule,
// the skipped prefix, and the options that follow the reference code.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/engine/tools/phs_channel_search.hpp"

namespace midtune::phs {
namespace {

constexpr int kLayers = 12;  // analysed layers 2..10; candidates need > 3 monotone layers
constexpr int kTokens = 230;

SearchOptions small_options() {
  SearchOptions o;
  o.skip_tokens = 30;
  o.smooth_window = 20;
  return o;
}

std::vector<int> channels_of(const std::vector<ChannelScore>& scores) {
  std::vector<int> out;
  for (const auto& s : scores) out.push_back(s.channel);
  return out;
}

// Not monotone: one hump over the positions (the cubic fit rises then falls).
double hump(int p) { return std::sin(3.14159265358979 * p / kTokens); }

// Fills channel c of layers [first, last] with f(position).
template <typename F>
void fill(LayerCurves& curves, int channel, int first, int last, F f) {
  for (int l = first; l <= last; ++l)
    for (int p = 0; p < curves.tokens; ++p) curves.at(l, p, channel) = static_cast<float>(f(l, p));
}

TEST(PhsCubicFit, RecoversACubicExactly) {
  const CubicFitter fitter(50);
  std::vector<double> y(50);
  for (int i = 0; i < 50; ++i) y[i] = 0.5 - 0.01 * i + 3e-4 * i * i - 2e-6 * i * i * i;
  const Eigen::VectorXd fit = fitter.fitted(y);
  for (int i = 0; i < 50; ++i) EXPECT_NEAR(fit[i], y[i], 1e-9) << i;
}

// Scalar reference: the normal equations of the unscaled Vandermonde solved
// directly agree with the QR projection on noisy data.
TEST(PhsCubicFit, MatchesNormalEquations) {
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 1.0);
  const int n = 120;
  std::vector<double> y(n);
  for (int i = 0; i < n; ++i) y[i] = std::sin(i * 0.05) + 0.3 * noise(rng);
  Eigen::MatrixXd v(n, 4);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < 4; ++k) v(i, k) = std::pow(static_cast<double>(i) / n, k);
  const Eigen::VectorXd yy = Eigen::Map<const Eigen::VectorXd>(y.data(), n);
  const Eigen::VectorXd coef = (v.transpose() * v).ldlt().solve(v.transpose() * yy);
  const Eigen::VectorXd reference = v * coef;
  const Eigen::VectorXd fit = CubicFitter(n).fitted(y);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(fit[i], reference[i], 1e-8) << i;
}

TEST(PhsCubicFit, TrendSign) {
  EXPECT_EQ(trend_sign(Eigen::VectorXd::LinSpaced(10, 0.0, 1.0)), 1);
  EXPECT_EQ(trend_sign(Eigen::VectorXd::LinSpaced(10, 1.0, 0.0)), -1);
  EXPECT_EQ(trend_sign(Eigen::VectorXd::Constant(10, 2.0)), 0);
  Eigen::VectorXd bump(5);
  bump << 0, 1, 2, 1, 0;
  EXPECT_EQ(trend_sign(bump), 0);
}

TEST(PhsSmoothing, MovingAverageAndSavitzkyGolay) {
  const std::vector<double> y = {1, 2, 3, 10, 5};
  EXPECT_EQ(moving_average(y, 2), (std::vector<double>{1.5, 2.5, 6.5, 7.5}));
  EXPECT_EQ(moving_average(y, 5).size(), 1u);
  EXPECT_THROW(moving_average(y, 6), std::invalid_argument);
  // Savitzky-Golay with a cubic keeps any cubic, edges included.
  std::vector<double> cubic(30);
  for (int i = 0; i < 30; ++i) cubic[i] = 2.0 + 0.3 * i - 0.02 * i * i + 0.001 * i * i * i;
  const auto s = savitzky_golay(cubic, 7);
  ASSERT_EQ(s.size(), cubic.size());
  for (int i = 0; i < 30; ++i) EXPECT_NEAR(s[i], cubic[i], 1e-9) << i;
  EXPECT_THROW(savitzky_golay(cubic, 6), std::invalid_argument);
}

TEST(PhsSmoothing, NormaliseAndSmoothness) {
  EXPECT_TRUE(min_max_normalise(std::vector<double>{3, 3, 3}).empty());
  EXPECT_EQ(min_max_normalise(std::vector<double>{1, 3, 2}), (std::vector<double>{0, 1, 0.5}));
  // A straight line has no curvature; scaling the curve does not matter.
  std::vector<double> line(100), scaled(100), wiggly(100);
  for (int i = 0; i < 100; ++i) {
    line[i] = 0.1 * i;
    scaled[i] = 0.1 * i + (i % 2) * 0.05;
    wiggly[i] = 0.1 * i + (i % 2) * 3.0;
  }
  EXPECT_NEAR(smoothness(line, Smoothing::moving_average, 10), 0.0, 1e-12);
  EXPECT_LT(smoothness(scaled, Smoothing::savitzky_golay, 9), smoothness(wiggly, Smoothing::savitzky_golay, 9));
}

// Channel 0: smooth monotone (log) curve in every layer -> found, first.
// Channel 1: noisy monotone trend -> found, after channel 0.
// Channel 2: a hump (not monotone) -> not found.
// Channel 3: a noisy hump -> not found.
// Channel 4: constant -> not found.
LayerCurves mixed_curves() {
  LayerCurves curves(kLayers, kTokens, 5);
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 1.0);
  fill(curves, 0, 0, kLayers - 1, [](int l, int p) { return (1.0 + 0.1 * l) * std::log1p(p); });
  fill(curves, 1, 0, kLayers - 1, [&](int, int p) { return 0.01 * p + 0.2 * noise(rng); });
  fill(curves, 2, 0, kLayers - 1, [](int, int p) { return hump(p); });
  fill(curves, 3, 0, kLayers - 1, [&](int, int p) { return hump(p) + 0.2 * noise(rng); });
  fill(curves, 4, 0, kLayers - 1, [](int, int) { return 0.7; });
  return curves;
}

TEST(PhsFindCandidates, MonotoneSmoothFoundNoisyAndNonMonotoneNot) {
  const auto found = find_candidates(mixed_curves(), small_options());
  ASSERT_EQ(channels_of(found), (std::vector<int>{0, 1}));
  EXPECT_LT(found[0].smoothness, found[1].smoothness);
  EXPECT_EQ(found[0].monotone_layers, (std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(found[0].direction, 1);
}

TEST(PhsFindCandidates, TopKKeepsTheSmoothest) {
  SearchOptions o = small_options();
  o.top_k = 1;
  EXPECT_EQ(channels_of(find_candidates(mixed_curves(), o)), (std::vector<int>{0}));
}

TEST(PhsFindCandidates, SmoothnessOrderingOfDecreasingChannels) {
  // Three decreasing channels with more and more wiggle: ranked in that order.
  LayerCurves curves(kLayers, kTokens, 3);
  for (int c = 0; c < 3; ++c) {
    const double wiggle = 0.002 * (2 - c);  // channel 2 smoothest
    fill(curves, c, 0, kLayers - 1, [&](int, int p) { return -0.01 * p + wiggle * ((p % 3) - 1); });
  }
  const auto found = find_candidates(curves, small_options());
  EXPECT_EQ(channels_of(found), (std::vector<int>{2, 1, 0}));
  for (const auto& f : found) EXPECT_EQ(f.direction, -1);
}

TEST(PhsFindCandidates, MoreThanAQuarterOfTheLayers) {
  // 12 layers: L/4 = 3. Channel 0 monotone in 3 layers (out), channel 1 in 4 (in).
  LayerCurves curves(kLayers, kTokens, 2);
  for (int c = 0; c < 2; ++c) fill(curves, c, 0, kLayers - 1, [](int, int p) { return hump(p); });
  fill(curves, 0, 2, 4, [](int, int p) { return 0.01 * p; });
  fill(curves, 1, 2, 5, [](int, int p) { return 0.01 * p; });
  const auto found = find_candidates(curves, small_options());
  ASSERT_EQ(channels_of(found), (std::vector<int>{1}));
  EXPECT_EQ(found[0].monotone_layers, (std::vector<int>{2, 3, 4, 5}));
  // Layers outside 2..L-2 do not count: monotone only in 0, 1 and 11 + two inside -> out.
  LayerCurves edge(kLayers, kTokens, 1);
  fill(edge, 0, 0, kLayers - 1, [](int, int p) { return hump(p); });
  for (int l : {0, 1, 11, 5, 6}) fill(edge, 0, l, l, [](int, int p) { return 0.01 * p; });
  EXPECT_TRUE(find_candidates(edge, small_options()).empty());
}

TEST(PhsFindCandidates, SkippedPrefixHidesHugeFirstTokens) {
  // Huge values at the first tokens (Sun et al.) break monotonicity unless skipped.
  LayerCurves curves(kLayers, kTokens, 1);
  fill(curves, 0, 0, kLayers - 1, [](int, int p) { return p < 10 ? 500.0 : 0.01 * p; });
  SearchOptions o = small_options();
  EXPECT_EQ(find_candidates(curves, o).size(), 1u);
  o.skip_tokens = 0;
  EXPECT_TRUE(find_candidates(curves, o).empty());
}

TEST(PhsFindCandidates, SameDirectionFollowsTheReferenceCode) {
  // Up in 2 layers, down in 2: 4 > 3 monotone layers for the paper, 2 for the code.
  LayerCurves curves(kLayers, kTokens, 1);
  fill(curves, 0, 0, kLayers - 1, [](int, int p) { return hump(p); });
  fill(curves, 0, 2, 3, [](int, int p) { return 0.01 * p; });
  fill(curves, 0, 4, 5, [](int, int p) { return -0.01 * p; });
  SearchOptions o = small_options();
  EXPECT_EQ(find_candidates(curves, o).size(), 1u);
  o.same_direction = true;
  EXPECT_TRUE(find_candidates(curves, o).empty());
}

TEST(PhsFindCandidates, MinOrMeanOverMonotoneLayers) {
  // Layer 2 perfectly straight (smoothness 0), the others wiggly.
  LayerCurves curves(kLayers, kTokens, 1);
  fill(curves, 0, 0, kLayers - 1, [](int, int p) { return 0.01 * p + 0.003 * ((p % 3) - 1); });
  fill(curves, 0, 2, 2, [](int, int p) { return 0.01 * p; });
  SearchOptions o = small_options();
  const auto by_min = find_candidates(curves, o);
  o.aggregate = LayerAggregate::mean;
  const auto by_mean = find_candidates(curves, o);
  ASSERT_EQ(by_min.size(), 1u);
  ASSERT_EQ(by_mean.size(), 1u);
  EXPECT_NEAR(by_min[0].smoothness, 0.0, 1e-9);
  EXPECT_GT(by_mean[0].smoothness, 1e-7);
}

TEST(PhsFindCandidates, BadOptionsAreRejected) {
  const LayerCurves curves = mixed_curves();
  SearchOptions o = small_options();
  o.top_k = 0;
  EXPECT_THROW(find_candidates(curves, o), std::invalid_argument);
  o = small_options();
  o.skip_tokens = kTokens - 4;
  try {
    find_candidates(curves, o);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tokens"), std::string::npos) << e.what();
  }
  o = small_options();
  o.smooth_window = kTokens;
  EXPECT_THROW(find_candidates(curves, o), std::invalid_argument);
  o = small_options();
  o.first_layer = kLayers - 1;
  EXPECT_THROW(find_candidates(curves, o), std::invalid_argument);
  o = small_options();
  o.smoothing = Smoothing::savitzky_golay;
  o.smooth_window = 10;
  EXPECT_THROW(find_candidates(curves, o), std::invalid_argument);
}

TEST(PhsRank, LowestLossFirstTiesBySmoothness) {
  std::vector<ChannelScore> c(3);
  c[0].channel = 5, c[0].smoothness = 0.3;
  c[1].channel = 9, c[1].smoothness = 0.1;
  c[2].channel = 2, c[2].smoothness = 0.2;
  EXPECT_EQ(rank_by_loss(c, {1.0, 2.0, 0.5}), (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(rank_by_loss(c, {1.0, 1.0, 1.0}), (std::vector<int>{3, 1, 2}));
  EXPECT_THROW(rank_by_loss(c, {1.0}), std::invalid_argument);
}

TEST(PhsOptions, NamesRoundTrip) {
  EXPECT_EQ(smoothing_from_string(to_string(Smoothing::savitzky_golay)), Smoothing::savitzky_golay);
  EXPECT_EQ(aggregate_from_string(to_string(LayerAggregate::mean)), LayerAggregate::mean);
  EXPECT_THROW(smoothing_from_string("gauss"), std::invalid_argument);
}

}  // namespace
}  // namespace midtune::phs
