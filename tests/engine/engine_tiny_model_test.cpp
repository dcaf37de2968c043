// The forward pass on a tiny random Llama GGUF written in the test (no real
// model needed, so it runs under ASan+UBSan): loading, bad-file errors, and
// the cache paths (chunked prefill, token-by-token decode, per-head RoPE
// scales that differ inside a GQA group).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/engine/ops/fp16.hpp"
#include "backends/engine/model_bench.hpp"
#include "core/cli/engine_commands.hpp"
#include "backends/engine/model.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"

namespace midtune::engine {
namespace {

constexpr std::uint32_t kF32 = 0, kQ8_0 = 8, kQ4_1 = 3;
constexpr int kHidden = 64, kHeads = 4, kKvHeads = 2, kFfn = 96, kLayers = 2, kVocab = 40;

std::vector<std::uint8_t> f32_bytes(std::size_t count, std::mt19937& rng, float scale, float offset = 0.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<std::uint8_t> out(count * 4);
  for (std::size_t i = 0; i < count; ++i) {
    const float v = offset + normal(rng);
    std::memcpy(&out[i * 4], &v, 4);
  }
  return out;
}

// Q8_0 / Q4_1 blocks with random quants and small fp16 scales.
std::vector<std::uint8_t> quant_bytes(std::uint32_t type, std::size_t count, std::mt19937& rng) {
  const std::size_t block = type == kQ8_0 ? 34 : 20;
  std::vector<std::uint8_t> out(count / 32 * block);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : out) b = static_cast<std::uint8_t>(byte(rng));
  for (std::size_t off = 0; off < out.size(); off += block) {
    const std::uint16_t d = float_to_fp16(type == kQ8_0 ? 0.002f : 0.02f);
    std::memcpy(&out[off], &d, 2);
    if (type == kQ4_1) {
      const std::uint16_t m = float_to_fp16(-0.15f);
      std::memcpy(&out[off + 2], &m, 2);
    }
  }
  return out;
}

struct TinyModel {
  std::string arch = "llama";
  std::uint64_t q_rows = kHeads * 16;  // a wrong value makes a shape error
  std::vector<std::uint8_t> bytes() const {
    std::mt19937 rng(42);
    testing::TinyGgufWriter w;
    w.add_string("general.architecture", arch);
    w.add_u32(arch + ".block_count", kLayers);
    w.add_u32(arch + ".context_length", 256);
    w.add_u32(arch + ".embedding_length", kHidden);
    w.add_u32(arch + ".feed_forward_length", kFfn);
    w.add_u32(arch + ".attention.head_count", kHeads);
    w.add_u32(arch + ".attention.head_count_kv", kKvHeads);
    w.add_f32(arch + ".rope.freq_base", 10000.0f);
    w.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_u32(arch + ".vocab_size", kVocab);
    w.add_tensor("token_embd.weight", {kHidden, kVocab}, kQ8_0, quant_bytes(kQ8_0, kHidden * kVocab, rng));
    w.add_tensor("output_norm.weight", {kHidden}, kF32, f32_bytes(kHidden, rng, 0.1f, 1.0f));
    for (int l = 0; l < kLayers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      w.add_tensor(p + "attn_norm.weight", {kHidden}, kF32, f32_bytes(kHidden, rng, 0.1f, 1.0f));
      w.add_tensor(p + "ffn_norm.weight", {kHidden}, kF32, f32_bytes(kHidden, rng, 0.1f, 1.0f));
      w.add_tensor(p + "attn_q.weight", {kHidden, q_rows}, kQ4_1, quant_bytes(kQ4_1, kHidden * q_rows, rng));
      w.add_tensor(p + "attn_k.weight", {kHidden, kKvHeads * 16}, kQ4_1, quant_bytes(kQ4_1, kHidden * kKvHeads * 16, rng));
      w.add_tensor(p + "attn_v.weight", {kHidden, kKvHeads * 16}, kF32, f32_bytes(kHidden * kKvHeads * 16, rng, 0.1f));
      w.add_tensor(p + "attn_output.weight", {kHeads * 16, kHidden}, kQ4_1, quant_bytes(kQ4_1, kHeads * 16 * kHidden, rng));
      w.add_tensor(p + "ffn_gate.weight", {kHidden, kFfn}, kQ4_1, quant_bytes(kQ4_1, kHidden * kFfn, rng));
      w.add_tensor(p + "ffn_up.weight", {kHidden, kFfn}, kQ8_0, quant_bytes(kQ8_0, kHidden * kFfn, rng));
      w.add_tensor(p + "ffn_down.weight", {kFfn, kHidden}, kQ4_1, quant_bytes(kQ4_1, kFfn * kHidden, rng));
    }
    return w.bytes();
  }
};

std::vector<float> last_logits(const Model& model, const std::vector<std::int32_t>& tokens, const RopeScales& scales,
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
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512vnni}) {
    if (!isa_available(isa)) continue;
    const Model model(file.path(), isa);
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
  const Model model(file.path());
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
    const Model model(shape_file.path());
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
  const Model model(file.path());
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
