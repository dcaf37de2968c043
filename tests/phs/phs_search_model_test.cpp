// `ga-run phs-search` on the real SmolLM2-135M with tiny sizes (4 strings x
// 96 tokens, 2 candidates, 1 validation prompt of 2 pairs): the printed
// table, the phs_channels rows, errors that need the model's shape, and the
// residual hook (ForwardHooks::on_layer_output) under chunked prefill.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>

#include "backends/engine/engine_backend.hpp"
#include "core/cli/commands.hpp"
#include "core/cli/phs_search_command.hpp"
#include "backends/engine/tools/phs_capture.hpp"
#include "schema/store.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/model_path.hpp"

namespace midtune::cli {
namespace {

class PhsSearchModel : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    model_ = testing::test_model_path();
    if (model_.empty()) GTEST_SKIP() << "SmolLM2 GGUF not found (set MIDTUNE_MODEL)";
  }
  PhsSearchArgs tiny() const {
    PhsSearchArgs a;
    a.model = model_.string();
    a.db = path("phs.db");
    a.strings = 4;
    a.tokens = 96;
    a.smooth_window = 10;
    a.top_k = 2;
    // The validation prompts, run for the plain model and for each
    // candidate, are most of the time: the fewest and shortest it takes.
    a.val_prompts = 1;
    a.val_pairs = 2;
    a.threads = 2;
    a.quiet = true;
    return a;
  }
  std::filesystem::path model_;
};

TEST_F(PhsSearchModel, WritesRankedCandidatesAndPrintsTheTable) {
  std::ostringstream out, err;
  ASSERT_EQ(run_phs_search(tiny(), out, err), kExitOk) << err.str();
  const std::string text = out.str();
  EXPECT_NE(text.find("| rank | channel | monotone layers |"), std::string::npos) << text;
  EXPECT_NE(text.find("plain model (no intervention): validation loss"), std::string::npos) << text;
  EXPECT_NE(text.find("written to " + path("phs.db")), std::string::npos) << text;

  Store store(path("phs.db"));
  std::vector<double> losses;
  std::set<int> channels;
  int expected_rank = 1;
  for (const PhsChannelRecord& row : store.phs_channels()) {
    const int channel = row.channel;
    EXPECT_GE(channel, 0);
    EXPECT_LT(channel, 576);
    EXPECT_GT(row.monotone_layers * 4, 30) << "monotone in more than L/4 = 7.5 of 30 layers";
    EXPECT_GE(row.smoothness, 0.0);
    EXPECT_TRUE(std::isfinite(row.validation_loss));
    EXPECT_GT(row.baseline_loss, 0.0);
    EXPECT_EQ(row.rank, expected_rank++);
    EXPECT_NE(row.settings.dump().find("\"tokens\":96"), std::string::npos);
    EXPECT_FALSE(row.model_name.empty());
    losses.push_back(row.validation_loss);
    channels.insert(channel);
    // Every stored channel is a row of the printed table.
    EXPECT_NE(text.find("| " + std::to_string(channel) + " "), std::string::npos) << text;
  }
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_LE(losses[0], losses[1]) << "rank 1 has the lowest validation loss";
  EXPECT_EQ(channels.size(), 2u);
}

TEST_F(PhsSearchModel, LayerRangeOutsideTheModelIsAUsageError) {
  PhsSearchArgs a = tiny();
  a.last_layer = 30;  // SmolLM2-135M has layers 0..29
  std::ostringstream out, err;
  EXPECT_EQ(run_phs_search(a, out, err), kExitUsage);
  EXPECT_NE(err.str().find("--first-layer/--last-layer"), std::string::npos) << err.str();
  EXPECT_FALSE(std::filesystem::exists(path("phs.db")));
}

TEST_F(PhsSearchModel, TooFewTokensForTheSkippedPrefixIsAUsageError) {
  PhsSearchArgs a = tiny();
  a.tokens = 32;  // 30 skipped leave 2
  std::ostringstream out, err;
  EXPECT_EQ(run_phs_search(a, out, err), kExitUsage);
  EXPECT_NE(err.str().find("tokens"), std::string::npos) << err.str();
}

// The hook sees the same residual rows whether the string arrives whole or
// in prefill_chunk pieces (it gets each piece's start index).
TEST_F(PhsSearchModel, ResidualHookIsIndependentOfPrefillChunking) {
  engine::EngineBackend backend(model_);
  const auto strings = engine::tools::random_token_strings(backend.tokenizer(), 2, 80, 9);
  ASSERT_EQ(strings[0].size(), 80u);
  engine::Model whole(model_);
  engine::Model chunked(model_);
  chunked.prefill_chunk = 24;
  const phs::LayerCurves a = engine::tools::average_residual_stream(whole, strings, 2);
  const phs::LayerCurves b = engine::tools::average_residual_stream(chunked, strings, 2);
  ASSERT_EQ(a.values.size(), b.values.size());
  ASSERT_EQ(a.layers, 30);
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a.values[i] - b.values[i])));
    scale = std::max(scale, static_cast<double>(std::abs(a.values[i])));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(worst, 1e-3 * scale) << "worst " << worst << " of " << scale;
}

}  // namespace
}  // namespace midtune::cli
