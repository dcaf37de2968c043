#include "backends/synthetic/synthetic_test_double.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace midtune {
namespace {

std::vector<BatchItem> items(double depth, int n) {
  std::vector<BatchItem> out;
  for (int i = 0; i < n; ++i) {
    BatchItem b;
    b.id = "d" + std::to_string(depth) + "-" + std::to_string(i);
    b.prompt_text = "prompt";
    b.gold = "value-" + std::to_string(i);
    b.gold_depth = depth;
    out.push_back(b);
  }
  return out;
}

double measured(SyntheticTestDoubleBackend& backend, const Intervention& iv, double depth) {
  auto out = backend.run(iv, items(depth, 400), {});
  int correct = 0;
  for (const auto& o : out) correct += o.gold_emitted_first;
  return correct / 400.0;
}

Intervention per_layer(const SyntheticTestDoubleBackend& b, int layers, bool target) {
  Intervention iv;
  for (int l = 0; l < layers; ++l) iv.rope_scale.push_back({target ? b.target_scale(l) : 1.0});
  return iv;
}

TEST(SyntheticTestDouble, UShapedBaselineAndTargetLiftsTheMiddle) {
  SyntheticTestDoubleBackend backend({.layers = 8, .heads = 2, .noise = 0.0, .seed = 3});
  const Intervention plain;
  const Intervention best = per_layer(backend, 8, true);
  EXPECT_GT(backend.accuracy(plain, 0.0), backend.accuracy(plain, 0.5) + 0.3);
  EXPECT_GT(backend.accuracy(plain, 1.0), backend.accuracy(plain, 0.5) + 0.3);
  EXPECT_GT(backend.accuracy(best, 0.5), backend.accuracy(plain, 0.5) + 0.3);
  // The empirical rate follows the curve.
  EXPECT_NEAR(measured(backend, plain, 0.5), backend.accuracy(plain, 0.5), 0.08);
  EXPECT_NEAR(measured(backend, best, 0.5), backend.accuracy(best, 0.5), 0.08);
}

TEST(SyntheticTestDouble, DeterministicAndEchoesGoldWhenCorrect) {
  SyntheticTestDoubleBackend a({.layers = 4, .heads = 2, .noise = 0.05, .seed = 9});
  SyntheticTestDoubleBackend b({.layers = 4, .heads = 2, .noise = 0.05, .seed = 9});
  Intervention iv;
  iv.rope_scale = {{1.3}};
  auto batch = items(0.5, 50);
  auto x = a.run(iv, batch, {});
  auto y = b.run(iv, batch, {});
  ASSERT_EQ(x.size(), batch.size());
  int correct = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].output_text, y[i].output_text);
    EXPECT_EQ(x[i].gold_emitted_first, y[i].gold_emitted_first);
    EXPECT_EQ(x[i].output_text.find(batch[i].gold) != std::string::npos, x[i].gold_emitted_first);
    correct += x[i].gold_emitted_first;
  }
  EXPECT_GT(correct, 0);
  EXPECT_LT(correct, 50);
}

TEST(SyntheticTestDouble, ValidatesInterventions) {
  SyntheticTestDoubleBackend backend({.layers = 4, .heads = 2});
  Intervention wrong_rows;
  wrong_rows.rope_scale = {{1.0}, {1.0}};
  EXPECT_THROW(backend.validate(wrong_rows), std::invalid_argument);
  Intervention wrong_heads;
  wrong_heads.rope_scale = {{1.0, 1.0, 1.0}};
  EXPECT_THROW(backend.validate(wrong_heads), std::invalid_argument);
  Intervention negative;
  negative.rope_scale = {{-1.0}};
  EXPECT_THROW(backend.validate(negative), std::invalid_argument);
  Intervention siw;
  siw.siw = Siw{};
  EXPECT_THROW(backend.validate(siw), std::invalid_argument);
  EXPECT_THROW(SyntheticTestDoubleBackend({.layers = 0}), std::invalid_argument);
  EXPECT_EQ(backend.identity().name, "synthetic-test-double");
}

// MPI evaluator ranks cut batches into units: an item's output must not
// depend on which other items share its batch.
TEST(SyntheticTestDouble, OutputsDoNotDependOnTheRestOfTheBatch) {
  SyntheticTestDoubleConfig config;
  config.layers = 4;
  config.prompt_latency_ms = 0.5;
  SyntheticTestDoubleBackend backend(config);
  Intervention iv;
  iv.rope_scale = {{1.3}};
  std::vector<BatchItem> batch = items(0.5, 12);
  const std::vector<BatchItem> more = items(0.0, 5);
  batch.insert(batch.end(), more.begin(), more.end());
  const auto whole = backend.run(iv, batch, {Mode::teacher_forced, 0});
  for (std::size_t unit : {1u, 4u, 5u}) {
    for (std::size_t begin = 0; begin < batch.size(); begin += unit) {
      const std::vector<BatchItem> part(batch.begin() + begin, batch.begin() + std::min(batch.size(), begin + unit));
      const auto got = backend.run(iv, part, {Mode::teacher_forced, 0});
      for (std::size_t k = 0; k < part.size(); ++k) {
        EXPECT_EQ(got[k].id, whole[begin + k].id);
        EXPECT_EQ(got[k].output_text, whole[begin + k].output_text);
        EXPECT_EQ(got[k].gold_logprob, whole[begin + k].gold_logprob);
      }
    }
  }
}

}  // namespace
}  // namespace midtune
