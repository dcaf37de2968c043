// The forward pass on a tiny random Llama GGUF written in the test (no real
// model needed, so it runs under ASan+UBSan): loading, bad-file errors, and
// the cache paths (chunked prefill, token-by-token decode, per-head RoPE
// scales that differ inside a GQA group).
#include <gtest/gtest.h>

#include <cmath>

#include "backends/engine/model_bench.hpp"
#include "core/cli/engine_commands.hpp"
#include "backends/engine/model.hpp"
#include "tests/engine/tiny_llama_gguf.hpp"

namespace midtune::engine {
namespace {

// The model is built by tests/engine/tiny_llama_gguf.hpp (shared with the
// GGUF mutation test).
constexpr int kHidden = testing::kTinyHidden, kHeads = testing::kTinyHeads, kLayers = testing::kTinyLayers,
              kVocab = testing::kTinyVocab;
using TinyModel = testing::TinyLlama;

std::vector<float> last_logits(Model& model, const std::vector<std::int32_t>& tokens, const RopeScales& scales,
                               int chunk) {
  const_cast<Model&>(model).prefill_chunk = chunk;
  Sequence seq(model, static_cast<int>(tokens.size()), scales);
  const int last = static_cast<int>(tokens.size()) - 1;
  return model.forward(seq, tokens, {}, std::span<const int>(&last, 1));
}

TEST(TinyModel, LoadsAndGivesFiniteLogitsOnEveryIsa) {
  testing::MemoryFile file(TinyModel{}.bytes());
  const std::vector<std::int32_t> tokens = {1, 5, 7, 39, 0, 12, 3, 3, 8, 21, 30};
  std::vector<float> reference;
  for (Isa isa : kAllIsas) {
    if (!isa_available(isa)) continue;
    Model model(file.path(), isa);
    EXPECT_EQ(model.config().layers, static_cast<std::uint32_t>(kLayers));
    EXPECT_TRUE(model.config().tied_output);
    const RopeScales ones = RopeScales::ones(kLayers, kHeads);
    const auto logits = last_logits(model, tokens, ones, 512);
    ASSERT_EQ(logits.size(), static_cast<std::size_t>(kVocab));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    if (reference.empty()) {
      reference = logits;
    } else {
      // Paths differ only by float summation order and exp polynomials.
      for (int i = 0; i < kVocab; ++i) EXPECT_NEAR(logits[i], reference[i], 0.05f) << to_string(isa);
    }
  }
}

TEST(TinyModel, ChunkedAndStepwiseMatchOnePassWithGqaSplitScales) {
  testing::MemoryFile file(TinyModel{}.bytes());
  Model model(file.path());
  const std::vector<std::int32_t> tokens = {2, 9, 14, 33, 6, 6, 17, 25, 38, 1, 4, 11, 19, 27, 35, 0, 13};
  RopeScales split = RopeScales::ones(kLayers, kHeads);
  split.scale[1] = 1.7f;  // layer 0: heads 0 and 1 share a KV head but not a scale
  split.scale[kHeads + 3] = 2.5f;
  for (const RopeScales& scales : {RopeScales::ones(kLayers, kHeads), split}) {
    const auto whole = last_logits(model, tokens, scales, 512);
    const auto chunked = last_logits(model, tokens, scales, 5);
    Sequence seq(model, static_cast<int>(tokens.size()), scales);
    std::vector<float> stepwise;
    const int zero = 0;
    for (std::int32_t t : tokens) stepwise = model.forward(seq, std::span<const std::int32_t>(&t, 1), {}, std::span<const int>(&zero, 1));
    for (int i = 0; i < kVocab; ++i) {
      EXPECT_NEAR(chunked[i], whole[i], 1e-4f);
      EXPECT_NEAR(stepwise[i], whole[i], 1e-4f);
    }
  }
  const auto plain = last_logits(model, tokens, RopeScales::ones(kLayers, kHeads), 512);
  const auto scaled = last_logits(model, tokens, split, 512);
  EXPECT_NE(plain, scaled);
}

TEST(TinyModel, BadInputsGetClearErrors) {
  TinyModel wrong_shape;
  wrong_shape.q_rows = kHeads * 16 + 32;
  testing::MemoryFile shape_file(wrong_shape.bytes());
  try {
    Model model(shape_file.path());
    FAIL() << "a wrong attn_q shape must be rejected";
  } catch (const std::invalid_argument& e) {
    // Layers load in parallel, so any layer may be the one named first.
    EXPECT_NE(std::string(e.what()).find(".attn_q.weight': expected shape"), std::string::npos) << e.what();
  }
  TinyModel other_arch;
  other_arch.arch = "gpt2";
  testing::MemoryFile arch_file(other_arch.bytes());
  EXPECT_THROW(Model{arch_file.path()}, std::exception);

  testing::MemoryFile file(TinyModel{}.bytes());
  Model model(file.path());
  Sequence seq(model, 4, RopeScales::ones(kLayers, kHeads));
  const std::vector<std::int32_t> bad_token = {kVocab};
  EXPECT_THROW(model.forward(seq, bad_token, {}, {}), std::invalid_argument);
  const std::vector<std::int32_t> too_many = {1, 2, 3, 4, 5};
  EXPECT_THROW(model.forward(seq, too_many, {}, {}), std::invalid_argument);
  RopeScales zero = RopeScales::ones(kLayers, kHeads);
  zero.scale[0] = 0.0f;
  EXPECT_THROW(Sequence(model, 4, zero), std::invalid_argument);
  EXPECT_THROW(Sequence(model, 4, RopeScales::ones(kLayers + 1, kHeads)), std::invalid_argument);
}

TEST(TinyModel, BenchModelAndItsCommandReportRates) {
  testing::MemoryFile file(TinyModel{}.bytes());
  ModelBenchOptions options;
  options.prompt_tokens = 12;
  options.decode_tokens = 3;
  options.threads = 1;
  const ModelBenchResult result = bench_model(file.path(), options);
  EXPECT_GT(result.prefill_tokens_per_second, 0.0);
  EXPECT_GT(result.decode_tokens_per_second, 0.0);
  const auto json = result.to_json(options);
  EXPECT_EQ(json.at("prompt_tokens"), 12);
  options.prompt_tokens = 0;
  EXPECT_THROW(bench_model(file.path(), options), std::invalid_argument);

  CLI::App app;
  add_engine_commands(app);
  const std::string path = file.path().string();
  ::testing::internal::CaptureStdout();
  std::string error;
  try {
    app.parse("bench-model --model " + path + " --prompt-tokens 8 --threads 1", false);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(error, "");
  EXPECT_NE(out.find("\"prefill_tok_s\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"prompt_tokens\":8"), std::string::npos) << out;
}

}  // namespace
}  // namespace midtune::engine
