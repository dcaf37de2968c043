// The forward pass on a tiny random Llama GGUF written in the test (no real
// model needed, so it runs under ASan+UBSan): loading, bad-file errors, and
// the cache paths (chunked prefill, token-by-token decode, per-head RoPE
// scales that differ inside a GQA group).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "backends/engine/model_bench.hpp"
#include "core/cli/engine_commands.hpp"
#include "backends/engine/engine_hooks.hpp"
#include "backends/engine/model.hpp"
#include "tests/engine/tiny_llama_gguf.hpp"

namespace midtune::engine {
namespace {

// The model is built by tests/engine/tiny_llama_gguf.hpp (shared with the
// GGUF mutation test).
constexpr int kHeads = testing::kTinyHeads, kLayers = testing::kTinyLayers, kVocab = testing::kTinyVocab;
using TinyModel = testing::TinyLlama;

std::vector<float> last_logits(Model& model, const std::vector<std::int32_t>& tokens, const SequenceScales& scales,
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
    const SequenceScales ones = SequenceScales::ones(kLayers, kHeads);
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
  SequenceScales split = SequenceScales::ones(kLayers, kHeads);
  split.scale[1] = 1.7f;  // layer 0: heads 0 and 1 share a KV head but not a scale
  split.scale[kHeads + 3] = 2.5f;
  for (const SequenceScales& scales : {SequenceScales::ones(kLayers, kHeads), split}) {
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
  const auto plain = last_logits(model, tokens, SequenceScales::ones(kLayers, kHeads), 512);
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
  Sequence seq(model, 4, SequenceScales::ones(kLayers, kHeads));
  const std::vector<std::int32_t> bad_token = {kVocab};
  EXPECT_THROW(model.forward(seq, bad_token, {}, {}), std::invalid_argument);
  const std::vector<std::int32_t> too_many = {1, 2, 3, 4, 5};
  EXPECT_THROW(model.forward(seq, too_many, {}, {}), std::invalid_argument);
  SequenceScales zero = SequenceScales::ones(kLayers, kHeads);
  zero.scale[0] = 0.0f;
  EXPECT_THROW(Sequence(model, 4, zero), std::invalid_argument);
  EXPECT_THROW(Sequence(model, 4, SequenceScales::ones(kLayers + 1, kHeads)), std::invalid_argument);
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

// The last row's logits of `tokens` through `model` with `iv`'s hooks.
std::vector<float> hooked_logits(Model& model, const std::vector<std::int32_t>& tokens, const Intervention& iv) {
  const int n = static_cast<int>(tokens.size()), last = n - 1;
  const hooks::EngineIntervention ei(model, iv, n, {{0, n / 2}, {n / 2, n}});
  Sequence seq(model, n, ei.sequence_scales());
  return model.forward(seq, tokens, ei.prompt_positions(), std::span<const int>(&last, 1), ei.hooks());
}

// Bytes written over `path` at `offset` as another program would: in
// place, the same size.
void overwrite(const std::filesystem::path& path, std::uint64_t offset, std::size_t count, std::uint8_t value) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const std::vector<std::uint8_t> junk(count, value);
  ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), static_cast<off_t>(offset)), static_cast<ssize_t>(count));
  ::close(fd);
}

// A model file written in place or truncated while a search runs on it:
// the loaded model computes exactly what it did (its weights, its content
// hash and PHS's weight columns are the bytes it loaded), and the process
// never faults on a mapping (SIGBUS). A model loaded afresh from the changed
// file does differ, so the comparison can fail.
TEST(TinyModel, AModelFileChangedAfterLoadChangesNothingItComputes) {
  testing::MemoryFile file(TinyModel{}.bytes());
  const std::vector<std::int32_t> tokens = {4, 8, 15, 16, 23, 2, 7, 1, 9, 30};
  Intervention phs;
  phs.hidden_channel = HiddenChannel{3, 0.0, {0, 1}};
  Model model(file.path());
  const std::string hash = model.content_hash();
  const auto plain = last_logits(model, tokens, SequenceScales::ones(kLayers, kHeads), 512);
  const auto hooked = hooked_logits(model, tokens, phs);
  ASSERT_NE(plain, hooked);

  const GgufFile before(file.path());
  const std::uint64_t embedding =
      before.data_offset() + before.tensor("token_embd.weight").offset;
  const std::uint64_t query = before.data_offset() + before.tensor("blk.0.attn_q.weight").offset;
  overwrite(file.path(), embedding, 4096, 0x3c);
  overwrite(file.path(), query, 256, 0x3c);
  EXPECT_EQ(last_logits(model, tokens, SequenceScales::ones(kLayers, kHeads), 512), plain);
  EXPECT_EQ(hooked_logits(model, tokens, phs), hooked);
  EXPECT_EQ(model.content_hash(), hash);
  {
    Model rewritten(file.path());
    EXPECT_NE(rewritten.content_hash(), hash);
    EXPECT_NE(last_logits(rewritten, tokens, SequenceScales::ones(kLayers, kHeads), 512), plain);
  }

  std::filesystem::resize_file(file.path(), before.file_size() / 3);
  EXPECT_EQ(last_logits(model, tokens, SequenceScales::ones(kLayers, kHeads), 512), plain);
  EXPECT_EQ(hooked_logits(model, tokens, phs), hooked);
  EXPECT_THROW(Model{file.path()}, GgufError) << "a truncated file is refused when loaded";

  // Of the file's bytes the model keeps only the weight columns PHS reads;
  // a read of anything else is an error naming the tensor, never garbage.
  try {
    model.file().tensor_data(model.file().tensor("token_embd.weight"));
    ADD_FAILURE() << "read released bytes";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("'token_embd.weight': its bytes were released"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model.file().bytes(), GgufError);
  EXPECT_NO_THROW(model.file().tensor_data(model.file().tensor("blk.1.attn_k.weight")));
}

}  // namespace
}  // namespace midtune::engine
