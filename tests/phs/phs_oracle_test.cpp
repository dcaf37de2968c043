// The C++ channel-search analysis against an independent numpy oracle
// (make_channel_search_fixture.py: np.polyfit, np.convolve, written from the
// paper's text). Both sides compute the same synthetic curves from a closed
// form with integer-hash noise; the fixture holds the oracle's candidates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <numbers>

#include <nlohmann/json.hpp>

#include "backends/engine/tools/phs_channel_search.hpp"
#include "tests/test_paths.hpp"

namespace midtune::phs {
namespace {

// Mirrors hash_noise / synthetic_value of the generator.
double hash_noise(int layer, int pos, int channel) {
  std::uint32_t h = static_cast<std::uint32_t>(layer * 7919 + pos * 104729 + channel * 1299709 + 12345);
  h *= 2654435761u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h / 4294967296.0 - 0.5;
}

double synthetic_value(int layer, int pos, int channel, int tokens) {
  const int kind = channel % 4;
  const double amp = 0.05 * (channel / 4 + 1);
  const double noise = hash_noise(layer, pos, channel);
  if (kind == 0) return 0.01 * pos + amp * 4 * noise;
  if (kind == 1) return std::sin(std::numbers::pi * pos / tokens) + amp * noise;
  if (kind == 2) return (layer < 3 + channel / 4 ? 1.0 : -1.0) * std::log1p(pos) + amp * noise;
  return noise;
}

TEST(PhsOracle, CandidatesMatchTheNumpyReference) {
  std::ifstream file(midtune::testing::source_dir() + "/tests/phs/fixtures/channel_search_oracle.json");
  ASSERT_TRUE(file) << "fixture missing";
  const auto fixture = nlohmann::json::parse(file);
  LayerCurves curves(fixture.at("layers"), fixture.at("tokens"), fixture.at("hidden"));
  for (int l = 0; l < curves.layers; ++l)
    for (int p = 0; p < curves.tokens; ++p)
      for (int c = 0; c < curves.hidden; ++c)
        curves.at(l, p, c) = static_cast<float>(synthetic_value(l, p, c, curves.tokens));

  for (const auto& test_case : fixture.at("cases")) {
    const auto& o = test_case.at("options");
    SearchOptions options;
    options.skip_tokens = o.at("skip");
    options.smoothing = smoothing_from_string(o.at("smoothing"));
    options.smooth_window = o.at("window");
    options.aggregate = aggregate_from_string(o.at("aggregate"));
    options.same_direction = o.at("same_direction");
    options.top_k = o.at("top_k");
    const auto found = find_candidates(curves, options);
    const auto& expected = test_case.at("expected");
    SCOPED_TRACE(o.dump());
    ASSERT_EQ(found.size(), expected.size());
    for (std::size_t i = 0; i < found.size(); ++i) {
      EXPECT_EQ(found[i].channel, expected[i].at("channel").get<int>()) << i;
      EXPECT_EQ(found[i].monotone_layers, expected[i].at("monotone_layers").get<std::vector<int>>()) << i;
      EXPECT_EQ(found[i].direction, expected[i].at("direction").get<int>()) << i;
      const double want = expected[i].at("smoothness");
      EXPECT_NEAR(found[i].smoothness, want, 1e-7 * std::max(1.0, want)) << i;
    }
  }
}

}  // namespace
}  // namespace midtune::phs
