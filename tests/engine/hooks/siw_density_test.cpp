// SIW dense areas (sec. 3.2 step 1) and per-query factors (step 2).
#include <gtest/gtest.h>

#include <vector>

#include "backends/engine/hooks/siw_density.hpp"

namespace midtune::engine::hooks {
namespace {

TEST(SiwDensity, TopShareIsCeilingOfThirtyPercent) {
  EXPECT_EQ(top_share_count(10), 3);
  EXPECT_EQ(top_share_count(11), 4);
  EXPECT_EQ(top_share_count(1), 1);
  EXPECT_EQ(top_share_count(100), 30);
}

TEST(SiwDensity, ChunkWithMoreTopTokensThanSigmaTimesMeanIsDense) {
  // n = 10 -> 3 marked tokens: 0 (sink), 3 and 4 (both in chunk 0).
  const std::vector<float> row{0.40f, 0.01f, 0.02f, 0.20f, 0.15f, 0.03f, 0.05f, 0.04f, 0.05f, 0.05f};
  const std::vector<TokenSpan> chunks{{2, 5}, {5, 8}};
  const DenseChunks d = find_dense_chunks(row, chunks, 1.0);
  EXPECT_EQ(d.counts, (std::vector<int>{2, 0}));
  EXPECT_EQ(d.dense, (std::vector<bool>{true, false}));  // 2 > 1 * 1, 0 > 1 false
  // sigma 2: 2 > 2 is false -> nothing dense.
  EXPECT_EQ(find_dense_chunks(row, chunks, 2.0).dense, (std::vector<bool>{false, false}));
  // Ties: tokens 6, 8, 9 all 0.05; with token 3 gone the lower index wins.
  std::vector<float> tie = row;
  tie[3] = 0.0f;
  tie[4] = 0.0f;
  const DenseChunks t = find_dense_chunks(tie, chunks, 1.0);  // marks 0, 6, 8
  EXPECT_EQ(t.counts, (std::vector<int>{0, 1}));
}

TEST(SiwDensity, FactorsPerQueryToken) {
  Siw siw;
  siw.alpha_dense = 0.5;
  siw.alpha_sparse = 1.5;
  const std::vector<TokenSpan> chunks{{2, 5}, {5, 8}};
  DenseChunks d{{2, 0}, {true, false}};
  const auto a = query_factors(siw, 10, chunks, d);
  EXPECT_EQ(a, (std::vector<float>{1.0f, 1.5f, 0.5f, 0.5f, 0.5f, 1.5f, 1.5f, 1.5f, 1.5f, 1.5f}));
  // No chunks: uniform alpha_sparse after token 0.
  const auto u = query_factors(siw, 3, {}, DenseChunks{});
  EXPECT_EQ(u, (std::vector<float>{1.0f, 1.5f, 1.5f}));
}

TEST(SiwDensity, HeadMeanRow) {
  const std::vector<float> rows{1, 0, 0, 0, 1, 0};
  EXPECT_EQ(head_mean_row(rows, 2, 3), (std::vector<float>{0.5f, 0.5f, 0.0f}));
  EXPECT_THROW(head_mean_row(rows, 4, 3), std::invalid_argument);
}

TEST(SiwDensity, ValidationNamesTheField) {
  Siw siw;
  siw.layers = {3, 30};
  try {
    validate_siw(siw, ModelShape{.layers = 30});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("siw.layers: layer 30"), std::string::npos) << e.what();
  }
  siw.layers = {3};
  siw.alpha_dense = -1;
  EXPECT_THROW(validate_siw(siw, ModelShape{.layers = 30}), std::invalid_argument);
  siw.alpha_dense = 0.5;
  EXPECT_NO_THROW(validate_siw(siw, ModelShape{.layers = 30}));
}

}  // namespace
}  // namespace midtune::engine::hooks
