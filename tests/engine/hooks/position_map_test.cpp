// CALIOPE calibrators (eq. 3-5) and Phi = t + c(m(t)) (eq. 2).
#include <gtest/gtest.h>

#include <vector>

#include "backends/engine/hooks/position_map.hpp"

namespace midtune::engine::hooks {
namespace {

PositionMap moses(double gap) { PositionMap p; p.kind = "moses"; p.gap = gap; return p; }
PositionMap hourglass(double lo, double hi) {
  PositionMap p; p.kind = "hourglass"; p.delta_min = lo; p.delta_max = hi; return p;
}
PositionMap decay(double d0, double lambda) { PositionMap p; p.kind = "decay"; p.delta0 = d0; p.lambda = lambda; return p; }

TEST(PositionMap, MosesJumpsAfterHalfTheChunks) {
  // d = 5: c(m) = 0 for m <= 2, gap for m >= 3.
  EXPECT_EQ(calibrator_offsets(moses(100), 5), (std::vector<double>{0, 0, 0, 100, 100, 100}));
  EXPECT_EQ(calibrator_offsets(moses(100), 4), (std::vector<double>{0, 0, 0, 100, 100}));
}

TEST(PositionMap, HourglassSumsParabolaGaps) {
  // d = 3: term(k) = dmin + 4 (k/2)(1 - k/2)(dmax - dmin); term(1) = dmax, term(2) = dmin.
  const auto c = calibrator_offsets(hourglass(5, 1000), 3);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_DOUBLE_EQ(c[0], 0);
  EXPECT_DOUBLE_EQ(c[1], 0);
  EXPECT_DOUBLE_EQ(c[2], 1000);
  EXPECT_DOUBLE_EQ(c[3], 1005);
  // A single chunk has no gaps (and no division by d - 1 = 0).
  EXPECT_EQ(calibrator_offsets(hourglass(5, 1000), 1), (std::vector<double>{0, 0}));
}

TEST(PositionMap, DecaySumsGeometricGaps) {
  const auto c = calibrator_offsets(decay(1000, 0.5), 4);
  EXPECT_EQ(c, (std::vector<double>{0, 0, 500, 750, 875}));
}

TEST(PositionMap, PhiFollowsChunkMembership) {
  // Tokens 0-1 before any chunk, chunk 1 = [2,4), gap 4-5 follows chunk 1, chunk 2 = [6,8), tail after.
  const std::vector<TokenSpan> chunks{{2, 4}, {6, 8}};
  const auto phi = calibrated_positions(decay(10, 1.0), 10, chunks);
  // c = {0, 0, 10}: m = 0,0,1,1,1,1,2,2,2,2
  EXPECT_EQ(phi, (std::vector<double>{0, 1, 2, 3, 4, 5, 16, 17, 18, 19}));
  const auto plain = calibrated_positions(moses(0), 10, chunks);
  for (int t = 0; t < 10; ++t) EXPECT_EQ(plain[t], t);
}

TEST(PositionMap, NoChunksIsIdentity) {
  const auto phi = calibrated_positions(moses(10000), 4, {});
  EXPECT_EQ(phi, (std::vector<double>{0, 1, 2, 3}));
}

TEST(PositionMap, NonIncreasingPhiIsRejectedWithTheToken) {
  // gap -3 (unchecked here) moves chunk 2 back by 3: Phi(6) = 3 <= Phi(5) = 5.
  const std::vector<TokenSpan> chunks{{2, 4}, {6, 8}};
  try {
    calibrated_positions(moses(-3), 10, chunks);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not strictly increasing at token 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate_position_map(moses(-3), ModelShape{}), std::invalid_argument);
}

TEST(PositionMap, ValidationNamesTheField) {
  EXPECT_NO_THROW(validate_position_map(moses(10000), ModelShape{}));
  EXPECT_NO_THROW(validate_position_map(hourglass(5, 1000), ModelShape{}));
  EXPECT_NO_THROW(validate_position_map(decay(1000, 0.95), ModelShape{}));
  EXPECT_NO_THROW(validate_position_map(decay(-0.5, 0.9), ModelShape{}));
  auto message = [](const PositionMap& p) {
    try { validate_position_map(p, ModelShape{}); } catch (const std::invalid_argument& e) { return std::string(e.what()); }
    return std::string();
  };
  EXPECT_NE(message(hourglass(-2, 10)).find("position_map.delta_min"), std::string::npos);
  EXPECT_NE(message(hourglass(5, -1)).find("position_map.delta_max"), std::string::npos);
  EXPECT_NE(message(decay(-5, 0.5)).find("position_map.delta0"), std::string::npos);
  EXPECT_NE(message(decay(-0.1, 1.5)).find("position_map.delta0"), std::string::npos);
  EXPECT_NE(message(decay(10, -0.1)).find("position_map.lambda"), std::string::npos);
  EXPECT_NE(message(moses(std::nan(""))).find("position_map.gap"), std::string::npos);
  PositionMap unknown;
  unknown.kind = "linear";
  EXPECT_NE(message(unknown).find("position_map.kind"), std::string::npos);
}

TEST(PositionMap, BadSpansAreRejected) {
  const std::vector<TokenSpan> overlapping{{2, 5}, {4, 6}};
  EXPECT_THROW(calibrated_positions(moses(1), 10, overlapping), std::invalid_argument);
  const std::vector<TokenSpan> past_end{{2, 12}};
  EXPECT_THROW(calibrated_positions(moses(1), 10, past_end), std::invalid_argument);
  const std::vector<TokenSpan> empty{{3, 3}};
  EXPECT_THROW(calibrated_positions(moses(1), 10, empty), std::invalid_argument);
}

}  // namespace
}  // namespace midtune::engine::hooks
