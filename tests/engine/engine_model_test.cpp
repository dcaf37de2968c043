// The forward pass against peers: last-position logits
// against the fp32 numpy reference over the same GGUF weights, and 32-token
// greedy continuations against llama.cpp (fixtures made by
// tests/reference/make_logits_fixtures.py).
//
// Tolerance: our activations are rounded to int8 per 32-block before every
// matmul (as llama.cpp's Q8_1), so logits differ from fp32 math, and a few
// prompts are sensitive (a rounding flip early on moves the last logits).
// llama.cpp itself, on these prompts' 50 reference top logits, is off by at
// most 1.02 (mean of per-prompt maxima 0.36; tests/reference).
// We require per prompt < kLogitTolerance and a mean < kMeanTolerance, and
// the same top-1 wherever the reference's top-2 margin exceeds kClearMargin.
// The test prints the measured errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>

#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "backends/engine/model.hpp"
#include "tests/engine/model_path.hpp"
#include "tests/test_paths.hpp"

namespace midtune::engine {
namespace {

constexpr double kLogitTolerance = 1.5;
constexpr double kMeanTolerance = 0.6;
constexpr double kClearMargin = 1.0;
constexpr double kNearTie = 0.5;  // top-2 logit margin accepted at a greedy divergence

nlohmann::json load_fixture(const std::string& name) {
  std::ifstream in(midtune::testing::source_dir() + "/tests/reference/fixtures/" + name);
  if (!in) throw std::runtime_error("missing fixture " + name);
  return nlohmann::json::parse(in);
}

class EngineModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto path = testing::test_model_path();
    if (!path.empty()) model_ = std::make_unique<Model>(path);
  }
  static void TearDownTestSuite() { model_.reset(); }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "model not found (set MIDTUNE_MODEL)";
  }
  static SequenceScales scales_from(const nlohmann::json& rows) {
    const ModelConfig& c = model_->config();
    SequenceScales s = SequenceScales::ones(c.layers, c.heads);
    for (std::size_t l = 0; l < rows.size(); ++l)
      for (std::size_t h = 0; h < rows[l].size(); ++h) s.scale[l * c.heads + h] = rows[l][h].get<float>();
    return s;
  }
  static std::vector<float> last_logits(const std::vector<std::int32_t>& tokens, SequenceScales scales,
                                        int chunk = 512) {
    Sequence seq(*model_, static_cast<int>(tokens.size()) + 1, std::move(scales));
    model_->prefill_chunk = chunk;
    const int last = static_cast<int>(tokens.size()) - 1;
    auto out = model_->forward(seq, tokens, {}, std::span<const int>(&last, 1));
    model_->prefill_chunk = 512;
    return out;
  }
  static std::unique_ptr<Model> model_;
};
std::unique_ptr<Model> EngineModel::model_;

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST_F(EngineModel, ConfigComesFromTheFile) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.layers, 30u);
  EXPECT_EQ(c.heads, 9u);
  EXPECT_EQ(c.kv_heads, 3u);
  EXPECT_EQ(c.vocab, 49152u);
  EXPECT_TRUE(c.tied_output);
}

TEST_F(EngineModel, LogitsMatchFp32Reference) {
  const auto fixture = load_fixture("logits_fp32.json");
  double worst = 0.0, sum = 0.0;
  int count = 0;
  for (const auto& cs : fixture.at("cases")) {
    const auto tokens = cs.at("tokens").get<std::vector<std::int32_t>>();
    const auto logits = last_logits(tokens, scales_from(cs.at("rope_scale")));
    const auto ids = cs.at("top_ids").get<std::vector<int>>();
    const auto ref = cs.at("top_logits").get<std::vector<double>>();
    double err = 0.0;
    for (std::size_t i = 0; i < ids.size(); ++i) err = std::max(err, std::fabs(logits[ids[i]] - ref[i]));
    worst = std::max(worst, err);
    sum += err;
    ++count;
    const std::string label = cs.at("prompt").get<std::string>().substr(0, 40) +
                              (cs.contains("scale_name") ? " [" + cs["scale_name"].get<std::string>() + "]" : "");
    EXPECT_LT(err, kLogitTolerance) << label;
    if (ref[0] - ref[1] > kClearMargin) {
      EXPECT_EQ(argmax(logits), ids[0]) << label;
    }
    std::printf("  max |logit - fp32| = %.4f  (top1 %d vs %d)  %s\n", err, argmax(logits), ids[0], label.c_str());
  }
  std::printf("max abs logit error vs fp32 reference: worst %.4f (tolerance %.2f), mean %.4f (tolerance %.2f)\n",
              worst, kLogitTolerance, sum / count, kMeanTolerance);
  EXPECT_LT(sum / count, kMeanTolerance);
}

TEST_F(EngineModel, ChunkedPrefillAndTokenByTokenDecodeAgreeWithOnePass) {
  const auto fixture = load_fixture("logits_fp32.json");
  const auto tokens = fixture["cases"][9]["tokens"].get<std::vector<std::int32_t>>();
  const SequenceScales ones = SequenceScales::ones(model_->config().layers, model_->config().heads);
  const auto whole = last_logits(tokens, ones);
  const auto chunked = last_logits(tokens, ones, 7);
  Sequence seq(*model_, static_cast<int>(tokens.size()), ones);
  std::vector<float> stepwise;
  const int zero = 0;
  for (std::int32_t t : tokens) stepwise = model_->forward(seq, std::span<const std::int32_t>(&t, 1), {}, std::span<const int>(&zero, 1));
  double chunk_err = 0.0, step_err = 0.0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    chunk_err = std::max(chunk_err, static_cast<double>(std::fabs(whole[i] - chunked[i])));
    step_err = std::max(step_err, static_cast<double>(std::fabs(whole[i] - stepwise[i])));
  }
  std::printf("max diff: chunked %.2e, token-by-token %.2e\n", chunk_err, step_err);
  // Per-row activation quantisation makes rows independent of batching; only
  // attention summation order differs.
  EXPECT_LT(chunk_err, 1e-3);
  EXPECT_LT(step_err, 1e-3);
}

// With two threads a decode step over a long cache splits its attention
// tiles across the threads (CpuDevice::attention: 3 key slots would leave one
// thread idle); with one thread each tile runs whole. Both must give the
// same logits bit for bit.
TEST_F(EngineModel, DecodeOverALongCacheIsBitIdenticalOnOneThreadAndTwo) {
  const auto fixture = load_fixture("logits_fp32.json");
  const auto base = fixture["cases"][9]["tokens"].get<std::vector<std::int32_t>>();
  std::vector<std::int32_t> tokens;
  while (tokens.size() < 300) tokens.insert(tokens.end(), base.begin(), base.end());
  tokens.resize(300);
  const SequenceScales ones = SequenceScales::ones(model_->config().layers, model_->config().heads);
  const auto run = [&](int threads) {
    std::vector<float> steps;
    tbb::task_arena arena(threads);
    arena.execute([&] {
      Sequence seq(*model_, 304, ones);
      const int last = 296;
      model_->forward(seq, std::span<const std::int32_t>(tokens.data(), 297), {}, std::span<const int>(&last, 1));
      const int zero = 0;
      for (int t = 297; t < 300; ++t) {
        const auto logits = model_->forward(seq, std::span<const std::int32_t>(&tokens[t], 1), {}, std::span<const int>(&zero, 1));
        steps.insert(steps.end(), logits.begin(), logits.end());
      }
    });
    return steps;
  };
  const auto one = run(1), two = run(2);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), sizeof(float) * one.size()));
}

TEST_F(EngineModel, NonTrivialRopeScaleChangesLogits) {
  const auto fixture = load_fixture("logits_fp32.json");
  const auto tokens = fixture["cases"][3]["tokens"].get<std::vector<std::int32_t>>();
  SequenceScales ones = SequenceScales::ones(model_->config().layers, model_->config().heads);
  SequenceScales twos = ones;
  std::fill(twos.scale.begin(), twos.scale.end(), 2.0f);
  const auto a = last_logits(tokens, ones), b = last_logits(tokens, twos);
  double diff = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_GT(diff, 0.1);
}

TEST_F(EngineModel, FloatPositionsShiftedByAConstantGiveTheSameLogits) {
  // RoPE scores depend only on position differences, so shifting every
  // position by 100.5 leaves the logits unchanged up to float rounding of the
  // angles (which int8 activation rounding can amplify a little); an uneven
  // remap (a CALIOPE-like gap of 50 mid-prompt) must change them far more.
  const auto fixture = load_fixture("logits_fp32.json");
  const SequenceScales ones = SequenceScales::ones(model_->config().layers, model_->config().heads);
  for (int which : {0, 2, 4, 6}) {
    const auto tokens = fixture["cases"][which]["tokens"].get<std::vector<std::int32_t>>();
    const int n = static_cast<int>(tokens.size()), last = n - 1;
    std::vector<double> plain(n), shifted(n), stretched(n);
    for (int i = 0; i < n; ++i) {
      plain[i] = i;
      shifted[i] = i + 100.5;
      stretched[i] = i < n / 2 ? i : i + 50.0;
    }
    auto run = [&](const std::vector<double>& pos) {
      Sequence seq(*model_, n, ones);
      return model_->forward(seq, tokens, pos, std::span<const int>(&last, 1));
    };
    const auto a = run(plain), b = run(shifted), c = run(stretched);
    const auto d = last_logits(tokens, ones);
    double shift_diff = 0.0, gap_diff = 0.0, default_diff = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      shift_diff = std::max(shift_diff, static_cast<double>(std::fabs(a[i] - b[i])));
      gap_diff = std::max(gap_diff, static_cast<double>(std::fabs(a[i] - c[i])));
      default_diff = std::max(default_diff, static_cast<double>(std::fabs(a[i] - d[i])));
    }
    std::printf("prompt %d: max logit change: shift by 100.5 %.4f, gap of 50 mid-prompt %.4f\n", which, shift_diff,
                gap_diff);
    EXPECT_EQ(default_diff, 0.0);  // explicit 0..n-1 equals the default positions
    // The int8 rounding of rotated activations moves with the angles; on the
    // AVX2 path one prompt measured 1.05 (0.94 on AVX-512), still far below
    // the gap's 3-19.
    EXPECT_LT(shift_diff, 1.5);
    EXPECT_GT(gap_diff, 2.0 * shift_diff);
  }
}

TEST_F(EngineModel, LastQueryRowReadoutSeesSoftmaxRows) {
  const auto fixture = load_fixture("logits_fp32.json");
  const auto tokens = fixture["cases"][0]["tokens"].get<std::vector<std::int32_t>>();
  const ModelConfig& c = model_->config();
  const int n = static_cast<int>(tokens.size()), last = n - 1;
  int calls = 0;
  ForwardHooks hooks;
  hooks.last_query_row_layers.assign(c.layers, 1);
  hooks.last_query_row = [&](int layer, std::span<const float> rows, int keys, int start, int count) {
    EXPECT_EQ(layer, calls);
    EXPECT_EQ(keys, n);
    EXPECT_EQ(start, 0);
    EXPECT_EQ(count, n);
    ASSERT_EQ(rows.size(), static_cast<std::size_t>(c.heads) * n);
    for (std::uint32_t h = 0; h < c.heads; ++h) {
      double sum = 0.0;
      for (int k = 0; k < n; ++k) sum += rows[h * n + k];
      EXPECT_NEAR(sum, 1.0, 1e-4) << "layer " << layer << " head " << h;
    }
    ++calls;
  };
  Sequence seq(*model_, n, SequenceScales::ones(c.layers, c.heads));
  const auto with_hook = model_->forward(seq, tokens, {}, std::span<const int>(&last, 1), &hooks);
  EXPECT_EQ(calls, static_cast<int>(c.layers));
  EXPECT_EQ(with_hook, last_logits(tokens, SequenceScales::ones(c.layers, c.heads)));  // observing changes nothing
  // SIW-style scaling of key 0's weight changes the output; factors of 1 do not.
  ForwardHooks siw;
  float alpha = 0.5f;
  siw.key0_weight_factors = [&](int, int, int count) { return std::vector<float>(count, alpha); };
  Sequence seq2(*model_, n, SequenceScales::ones(c.layers, c.heads));
  const auto scaled = model_->forward(seq2, tokens, {}, std::span<const int>(&last, 1), &siw);
  EXPECT_NE(scaled, with_hook);
  alpha = 1.0f;
  Sequence seq3(*model_, n, SequenceScales::ones(c.layers, c.heads));
  EXPECT_EQ(model_->forward(seq3, tokens, {}, std::span<const int>(&last, 1), &siw), with_hook);
}

TEST_F(EngineModel, GreedyContinuationsMatchLlamaCpp) {
  const auto fixture = load_fixture("greedy_llamacpp.json");
  const SequenceScales ones = SequenceScales::ones(model_->config().layers, model_->config().heads);
  int identical = 0, total = 0;
  for (const auto& cs : fixture.at("cases")) {
    const auto prompt = cs.at("tokens").get<std::vector<std::int32_t>>();
    const auto expected = cs.at("continuation").get<std::vector<std::int32_t>>();
    Sequence seq(*model_, static_cast<int>(prompt.size() + expected.size()) + 1, ones);
    const int last = static_cast<int>(prompt.size()) - 1;
    auto logits = model_->forward(seq, prompt, {}, std::span<const int>(&last, 1));
    const int zero = 0;
    ++total;
    bool diverged = false;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const int ours = argmax(logits);
      if (ours != expected[i]) {
        std::vector<float> sorted = logits;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        const double margin = sorted[0] - sorted[1];
        const double gap = logits[ours] - logits[expected[i]];
        std::printf("  divergence at token %zu: ours %d, llama.cpp %d, our logit gap %.3f (top-2 margin %.3f): %s\n",
                    i, ours, expected[i], gap, margin, cs["prompt"].get<std::string>().substr(0, 40).c_str());
        EXPECT_LT(gap, kNearTie) << "not a near-tie";
        diverged = true;
        break;
      }
      const std::int32_t next = expected[i];
      if (i + 1 < expected.size()) logits = model_->forward(seq, std::span<const std::int32_t>(&next, 1), {}, std::span<const int>(&zero, 1));
    }
    if (!diverged) ++identical;
  }
  std::printf("greedy continuations identical to llama.cpp: %d of %d\n", identical, total);
}

}  // namespace
}  // namespace midtune::engine
