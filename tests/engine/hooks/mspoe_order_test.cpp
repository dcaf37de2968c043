// Ms-PoE score (eq. 1), ratio spacing (eq. 2) and head orders.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backends/engine/hooks/mspoe_order.hpp"

namespace midtune::engine::hooks {
namespace {

MsPoe with_order(const std::string& order) {
  MsPoe m;
  m.order = order;
  return m;
}

// Three heads over four keys. Threshold alpha/n = 3/4 with alpha 3 is too
// high for any row here, so use alpha = 1 (threshold 0.25).
// head 0: one key above 0.25      -> S = 1/4, entropy low-ish
// head 1: two keys above 0.25     -> S = 2/4
// head 2: flat (0.25 each, none >) -> S = 0, entropy max
const std::vector<float> kRows{0.70f, 0.10f, 0.10f, 0.10f,
                               0.45f, 0.45f, 0.05f, 0.05f,
                               0.25f, 0.25f, 0.25f, 0.25f};

TEST(MsPoeOrder, AwarenessScoreCountsKeysAboveAlphaTimesMean) {
  EXPECT_DOUBLE_EQ(awareness_score(std::span(kRows).subspan(0, 4), 1.0), 0.25);
  EXPECT_DOUBLE_EQ(awareness_score(std::span(kRows).subspan(4, 4), 1.0), 0.5);
  EXPECT_DOUBLE_EQ(awareness_score(std::span(kRows).subspan(8, 4), 1.0), 0.0);
  EXPECT_DOUBLE_EQ(awareness_score(std::span(kRows).subspan(0, 4), 3.0), 0.0);
}

TEST(MsPoeOrder, PaperSpacingReachesMaxReferenceSpacingDoesNot) {
  MsPoe m;  // 1.2 .. 1.8
  const auto paper = spaced_ratios(m, 4);
  EXPECT_DOUBLE_EQ(paper.front(), 1.2);
  EXPECT_DOUBLE_EQ(paper.back(), 1.8);
  EXPECT_NEAR(paper[1], 1.4, 1e-12);
  m.reference_spacing = true;
  const auto ref = spaced_ratios(m, 4);
  EXPECT_NEAR(ref[1], 1.35, 1e-12);
  EXPECT_NEAR(ref.back(), 1.65, 1e-12);
  MsPoe one;
  EXPECT_EQ(spaced_ratios(one, 1), std::vector<double>{1.2});
}

TEST(MsPoeOrder, AwarenessGivesTheMostAwareHeadTheSmallestRatio) {
  MsPoe m = with_order("awareness");
  m.alpha = 1.0;
  // Scores 0.25, 0.5, 0 -> ranks 1, 0, 2.
  EXPECT_EQ(ratio_index_per_head(m, kRows, 3, 4, 5), (std::vector<int>{1, 0, 2}));
  const auto r = head_ratios(m, kRows, 3, 4, 5);
  EXPECT_DOUBLE_EQ(r[1], 1.2);
  EXPECT_DOUBLE_EQ(r[2], 1.8);
}

TEST(MsPoeOrder, ReferenceArgsortUsesThePermutationAsIndex) {
  MsPoe m = with_order("reference-argsort");
  m.alpha = 1.0;
  // argsort(-S) = [1, 0, 2]: head 0 gets r[1], head 1 gets r[0], head 2 gets r[2].
  EXPECT_EQ(ratio_index_per_head(m, kRows, 3, 4, 0), (std::vector<int>{1, 0, 2}));
  // With four heads the permutation and its inverse differ.
  const std::vector<float> rows4{0.1f, 0.1f, 0.1f, 0.7f,   // S(alpha 1) = 1/4
                                 0.4f, 0.4f, 0.1f, 0.1f,   // 2/4
                                 0.3f, 0.3f, 0.3f, 0.1f,   // 3/4
                                 0.25f, 0.25f, 0.25f, 0.25f};  // 0
  MsPoe aware = with_order("awareness");
  aware.alpha = 1.0;
  m.order = "reference-argsort";
  // ranks by descending S: head2 0, head1 1, head0 2, head3 3.
  EXPECT_EQ(ratio_index_per_head(aware, rows4, 4, 4, 0), (std::vector<int>{2, 1, 0, 3}));
  // argsort(-S) = [2, 1, 0, 3] - equal here; swap heads to break the symmetry.
  const std::vector<float> rows4b{0.3f, 0.3f, 0.3f, 0.1f,   // 3/4
                                  0.25f, 0.25f, 0.25f, 0.25f,  // 0
                                  0.1f, 0.1f, 0.1f, 0.7f,   // 1/4
                                  0.4f, 0.4f, 0.1f, 0.1f};  // 2/4
  EXPECT_EQ(ratio_index_per_head(aware, rows4b, 4, 4, 0), (std::vector<int>{0, 3, 2, 1}));
  EXPECT_EQ(ratio_index_per_head(m, rows4b, 4, 4, 0), (std::vector<int>{0, 3, 2, 1}));
  const std::vector<float> rows4c{0.25f, 0.25f, 0.25f, 0.25f,  // 0
                                  0.3f, 0.3f, 0.3f, 0.1f,   // 3/4
                                  0.4f, 0.4f, 0.1f, 0.1f,   // 2/4
                                  0.1f, 0.1f, 0.1f, 0.7f};  // 1/4
  EXPECT_EQ(ratio_index_per_head(aware, rows4c, 4, 4, 0), (std::vector<int>{3, 0, 1, 2}));
  EXPECT_EQ(ratio_index_per_head(m, rows4c, 4, 4, 0), (std::vector<int>{1, 2, 3, 0}));
}

TEST(MsPoeOrder, SequentialEntropyAndRandom) {
  EXPECT_EQ(ratio_index_per_head(with_order("sequential"), kRows, 3, 4, 0), (std::vector<int>{0, 1, 2}));
  // Entropy: head 2 (flat) highest, then head 1, then head 0.
  EXPECT_EQ(ratio_index_per_head(with_order("entropy"), kRows, 3, 4, 0), (std::vector<int>{2, 1, 0}));
  MsPoe r = with_order("random");
  r.seed = 7;
  const std::vector<float> rows(9 * 4, 0.25f);
  const auto a = ratio_index_per_head(r, rows, 9, 4, 3);
  EXPECT_EQ(a, ratio_index_per_head(r, rows, 9, 4, 3));  // deterministic
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8}));  // a permutation
  bool differs = false;
  for (int layer = 0; layer < 8; ++layer) differs = differs || ratio_index_per_head(r, rows, 9, 4, layer) != a;
  EXPECT_TRUE(differs);
}

TEST(MsPoeOrder, BadShapesAndParametersAreRejected) {
  EXPECT_THROW(ratio_index_per_head(MsPoe{}, kRows, 3, 5, 0), std::invalid_argument);
  MsPoe m;
  m.min_ratio = 2.0;
  m.max_ratio = 1.5;
  try {
    validate_mspoe(m, ModelShape{.layers = 30});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mspoe.min_ratio"), std::string::npos) << e.what();
  }
  MsPoe layer;
  layer.first_layer = 30;
  EXPECT_THROW(validate_mspoe(layer, ModelShape{.layers = 30}), std::invalid_argument);
  MsPoe order = with_order("sideways");
  EXPECT_THROW(validate_mspoe(order, ModelShape{.layers = 30}), std::invalid_argument);
  EXPECT_NO_THROW(validate_mspoe(MsPoe{}, ModelShape{.layers = 30}));
}

}  // namespace
}  // namespace midtune::engine::hooks
