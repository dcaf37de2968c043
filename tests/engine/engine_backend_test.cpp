// The engine as a Backend on the real model: both modes, their agreement
// with an empty intervention, both schedules, RoPE-scale handling and
// validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "backends/engine/engine_backend.hpp"
#include "backends/engine/engine_hooks.hpp"
#include "tests/engine/model_path.hpp"

namespace midtune::engine {
namespace {

class EngineBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto path = testing::test_model_path();
    if (!path.empty()) backend_ = std::make_unique<EngineBackend>(path);
  }
  static void TearDownTestSuite() { backend_.reset(); }
  void SetUp() override {
    if (!backend_) GTEST_SKIP() << "model not found (set MIDTUNE_MODEL)";
  }
  static std::unique_ptr<EngineBackend> backend_;
};
std::unique_ptr<EngineBackend> EngineBackendTest::backend_;

std::string chat(const std::string& user) {
  return "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

std::vector<BatchItem> kv_items() {
  // Golds chosen so some are emitted first and some are not.
  std::vector<BatchItem> items;
  const std::string context =
      "The key 'apple' maps to 4471. The key 'pear' maps to 9032. The key 'plum' maps to 1187. ";
  const char* keys[] = {"apple", "pear", "plum"};
  // This small model restates the question: the gold is its first words.
  const char* golds[] = {"The key 'apple' maps to 4471", "The key 'pear' maps to 9032",
                         "The key 'plum' maps to 1187"};
  for (int i = 0; i < 3; ++i) {
    BatchItem item;
    item.id = std::string("kv-") + keys[i];
    item.prompt_text = chat(context + "What does '" + keys[i] + "' map to? Answer with the number only.");
    item.gold = golds[i];
    items.push_back(item);
  }
  BatchItem capital;
  capital.id = "capital";
  capital.prompt_text = chat("What is the capital of France? Answer in one word.");
  capital.gold = "The capital of France is Paris.";
  items.push_back(capital);
  BatchItem wrong = capital;
  wrong.id = "wrong-gold";
  wrong.gold = "The capital of France is Berlin.";
  items.push_back(wrong);
  return items;
}

TEST_F(EngineBackendTest, IdentityComesFromTheModel) {
  const ModelIdentity id = backend_->identity();
  EXPECT_EQ(id.architecture, "llama");
  EXPECT_EQ(id.layers, 30);
  EXPECT_EQ(id.heads, 9);
  EXPECT_EQ(id.kv_heads, 3);
  EXPECT_EQ(id.hidden, 576);
  EXPECT_FALSE(id.tokenizer_hash.empty());
}

// backend.precision: fp32 runs the same file with fp32 weights and
// activations: its own identity (no shared cache entries), answers close to
// the default's int8-activation path but not the same numbers.
TEST_F(EngineBackendTest, Fp32PrecisionIsMarkedAndStaysCloseToTheDefault) {
  EngineOptions fp32_options;
  fp32_options.fp32 = true;
  EngineBackend fp32(testing::test_model_path(), fp32_options);
  EXPECT_EQ(backend_->identity().precision, "");
  EXPECT_EQ(fp32.identity().precision, "fp32");
  EXPECT_NE(fp32.identity().key(), backend_->identity().key());
  const auto items = kv_items();
  const RunOptions tf{Mode::teacher_forced, 0};
  const auto a = backend_->run(Intervention{}, items, tf), b = fp32.run(Intervention{}, items, tf);
  double worst = 0.0, total = 0.0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i].gold_logprob - b[i].gold_logprob));
    total += std::fabs(a[i].gold_logprob - b[i].gold_logprob);
  }
  std::printf("  fp32 vs default: |d gold log-prob| worst %.3f, total %.3f over %zu items\n", worst, total, items.size());
  EXPECT_GT(total, 0.0);
  EXPECT_LT(worst, 1.0);
}

// backend.kv_cache: bf16 on the CPU engine: keys and values rounded once to
// bf16 as cached (half the cache's bytes), its own identity with either
// weight precision, answers close to the fp32 cache's.
TEST_F(EngineBackendTest, Bf16KvCacheIsMarkedAndStaysCloseToTheFp32Cache) {
  EngineOptions bf16_options;
  bf16_options.kv_cache = KvForm::bf16;
  EngineBackend bf16(testing::test_model_path(), bf16_options);
  EXPECT_EQ(bf16.identity().precision, "native, bf16 KV cache");
  EXPECT_NE(bf16.identity().key(), backend_->identity().key());
  EXPECT_EQ(bf16.execution()["precision"], "int8 activations (float types at their own precision), bf16 KV cache");
  EXPECT_EQ(Sequence::cache_bytes(bf16.model().config(), bf16.model().device(), 64) * 2,
            Sequence::cache_bytes(backend_->model().config(), backend_->model().device(), 64));
  bf16_options.fp32 = true;
  EXPECT_EQ(EngineBackend(testing::test_model_path(), bf16_options).identity().precision, "fp32, bf16 KV cache");
  const auto items = kv_items();
  const RunOptions tf{Mode::teacher_forced, 0};
  const auto a = backend_->run(Intervention{}, items, tf), b = bf16.run(Intervention{}, items, tf);
  double worst = 0.0, total = 0.0;
  int same = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i].gold_logprob - b[i].gold_logprob));
    total += std::fabs(a[i].gold_logprob - b[i].gold_logprob);
    same += a[i].gold_emitted_first == b[i].gold_emitted_first;
  }
  std::printf("  bf16 vs fp32 KV cache: |d gold log-prob| worst %.3f, total %.3f; gold-first equal on %d of %zu\n",
              worst, total, same, items.size());
  EXPECT_GT(total, 0.0);
  EXPECT_LT(worst, 1.0);
}

TEST_F(EngineBackendTest, GenerateAndTeacherForcedAgreeOnGoldEmittedFirst) {
  const auto items = kv_items();
  RunOptions tf{Mode::teacher_forced, 0};
  RunOptions gen{Mode::generate, 16};
  const auto forced = backend_->run(Intervention{}, items, tf);
  const auto generated = backend_->run(Intervention{}, items, gen);
  ASSERT_EQ(forced.size(), items.size());
  int emitted = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const bool starts = generated[i].output_text.rfind(items[i].gold, 0) == 0;
    std::printf("  %-12s generated '%s'  teacher-forced first=%d logprob=%.3f\n", items[i].id.c_str(),
                generated[i].output_text.c_str(), forced[i].gold_emitted_first, forced[i].gold_logprob);
    EXPECT_EQ(starts, forced[i].gold_emitted_first) << items[i].id;
    EXPECT_LE(forced[i].gold_logprob, 0.0);
    EXPECT_GT(forced[i].prompt_tokens, 10);
    emitted += forced[i].gold_emitted_first;
  }
  EXPECT_GT(emitted, 0) << "the model should get at least the capital right";
  EXPECT_LT(emitted, static_cast<int>(items.size())) << "'Berlin' must not be emitted first";
}

TEST_F(EngineBackendTest, RopeScaleOneEqualsEmptyAndOtherScalesChangeLogprobs) {
  const auto items = kv_items();
  RunOptions tf{Mode::teacher_forced, 0};
  Intervention ones;
  ones.rope_scale = {{1.0}};
  Intervention per_layer;
  per_layer.rope_scale.assign(30, std::vector<double>(9, 1.0));
  Intervention scaled;
  scaled.rope_scale = {{2.5}};
  const auto plain = backend_->run(Intervention{}, items, tf);
  const auto a = backend_->run(ones, items, tf);
  const auto b = backend_->run(per_layer, items, tf);
  const auto c = backend_->run(scaled, items, tf);
  double changed = 0.0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(a[i].gold_logprob, plain[i].gold_logprob);
    EXPECT_EQ(b[i].gold_logprob, plain[i].gold_logprob);
    changed = std::max(changed, std::fabs(c[i].gold_logprob - plain[i].gold_logprob));
  }
  EXPECT_GT(changed, 1e-3);
}

// The prompt prefix a batch shares is prefilled once (a batch of KV prompts
// repeats its instructions); reuse is only an optimisation, so every output
// must be what a fresh sequence per item gives.
TEST_F(EngineBackendTest, SharedPrefixReuseChangesNothingButTheWork) {
  EngineOptions no_reuse;
  no_reuse.reuse_prefix = false;
  EngineBackend fresh(testing::test_model_path(), no_reuse);
  const auto items = kv_items();
  Intervention pi;
  pi.rope_scale = {{1.1}};
  for (const Intervention& iv : {Intervention{}, pi}) {
    for (const RunOptions& options : {RunOptions{Mode::teacher_forced, 0}, RunOptions{Mode::generate, 12}}) {
      const auto reused = backend_->run(iv, items, options);
      const RunStats with = backend_->last_run_stats();
      const auto plain = fresh.run(iv, items, options);
      const RunStats without = fresh.last_run_stats();
      // "<|im_start|>user\n" (and, for the three KV items, the context) is shared by all five.
      EXPECT_GE(with.prefix_tokens, 3u);
      EXPECT_EQ(without.prefix_tokens, 0u);
      EXPECT_EQ(with.prompt_tokens, without.prompt_tokens);
      EXPECT_EQ(with.forward_tokens + (items.size() - 1) * with.prefix_tokens, without.forward_tokens);
      for (std::size_t i = 0; i < items.size(); ++i) {
        EXPECT_EQ(reused[i].output_text, plain[i].output_text) << items[i].id;
        EXPECT_EQ(reused[i].gold_emitted_first, plain[i].gold_emitted_first) << items[i].id;
        EXPECT_NEAR(reused[i].gold_logprob, plain[i].gold_logprob, 1e-3) << items[i].id;
      }
    }
  }
  // Interventions that read the whole prompt first never share a prefix.
  Intervention siw;
  siw.siw = Siw{0.5, 0.5, 1.0, {1}};
  backend_->run(siw, items, RunOptions{Mode::teacher_forced, 0});
  EXPECT_EQ(backend_->last_run_stats().prefix_tokens, 0u);
}

// Each "The key ... ." sentence of the KV items is a chunk.
std::vector<BatchItem> chunked_kv_items() {
  auto items = kv_items();
  for (auto& item : items) {
    for (std::size_t at = item.prompt_text.find("The key"); at != std::string::npos;
         at = item.prompt_text.find("The key", at + 1)) {
      item.chunks.push_back({at, item.prompt_text.find('.', at) + 1});
    }
  }
  return items;
}

// The schedule is how items go through the model, not what they answer: on
// the same device, packed passes (about two items a pass here) give the
// per-sequence schedule's decisions and texts, for the plain model (which
// the per-sequence schedule runs from a shared prefix), a RoPE scale, an
// attention temperature and SelfExtend (their layers attend per sequence in
// a packed pass; SelfExtend's far keys in a second cache, decode steps
// included) and every mechanism that reads the whole prompt.
TEST_F(EngineBackendTest, ASchedulesAnswersAreTheOthers) {
  EngineBackend packed(testing::test_model_path(), {.schedule = Schedule::packed, .batch_tokens = 160});
  EXPECT_EQ(packed.batch_tokens(), 160u);
  EXPECT_EQ(packed.identity().key(), backend_->identity().key()) << "the same numbers, the same cache entries";
  EXPECT_EQ(packed.execution(), backend_->execution());
  const auto items = chunked_kv_items();
  Intervention pi, mspoe, caliope, siw, phs, temperature, self_extend;
  pi.rope_scale = {{1.1}};
  temperature.attention_temperature = AttentionTemperature{0.8, {15, 16, 17, 18, 19, 20}};
  self_extend.self_extend = SelfExtend{4, 16, {5, 6, 7, 8, 9, 10}};
  mspoe.mspoe = MsPoe{};
  caliope.position_map = PositionMap{"decay", 10000, 5, 1000, 20, 0.5};
  siw.siw = Siw{0.5, 1.5, 1.0, {5, 6, 7, 8, 9, 10}};
  phs.hidden_channel = HiddenChannel{17, 4.0, {5, 6, 7, 8, 9, 10}};
  for (const Intervention& iv : {Intervention{}, pi, mspoe, caliope, siw, phs, temperature, self_extend}) {
    const std::string name = iv.to_json().dump();
    for (const RunOptions& options : {RunOptions{Mode::teacher_forced, 0}, RunOptions{Mode::generate, 8}}) {
      // Generation: the plain model, PHS (a hook on every decode step) and
      // the temperature and SelfExtend (their layers leave the batched
      // decode steps).
      if (options.mode == Mode::generate && !iv.to_json().empty() && !iv.hidden_channel && !iv.attention_temperature &&
          !iv.self_extend) {
        continue;
      }
      const auto expected = backend_->run(iv, items, options);
      const auto got = packed.run(iv, items, options);
      EXPECT_GT(packed.last_run_stats().passes, 1) << name;
      ASSERT_EQ(got.size(), items.size());
      for (std::size_t i = 0; i < items.size(); ++i) {
        EXPECT_EQ(got[i].id, items[i].id);
        EXPECT_EQ(got[i].prompt_tokens, expected[i].prompt_tokens);
        EXPECT_EQ(got[i].output_text, expected[i].output_text) << name << " " << items[i].id;
        EXPECT_EQ(got[i].gold_emitted_first, expected[i].gold_emitted_first) << name << " " << items[i].id;
        EXPECT_NEAR(got[i].gold_logprob, expected[i].gold_logprob, 1e-3) << name << " " << items[i].id;
      }
    }
  }
}

// teacher_forced under Ms-PoE, CALIOPE, SIW and PHS feeds all gold tokens
// in one call after the prompt; it must give what one decode step per gold
// token (the generate path) gives. PHS is the strong setting of the
// cross-check fixture (logits move by 3.6-6.6), so scaling only the call's
// last query, not every gold row, would fail here.
TEST_F(EngineBackendTest, HookedTeacherForcedEqualsStepByStepDecoding) {
  const auto items = chunked_kv_items();
  Intervention mspoe, caliope, siw, phs, phs_siw;
  mspoe.mspoe = MsPoe{};
  caliope.position_map = PositionMap{"decay", 10000, 5, 1000, 20, 0.5};
  siw.siw = Siw{0.5, 1.5, 1.0, {5, 6, 7, 8, 9, 10}};
  phs.hidden_channel = HiddenChannel{17, 4.0, {}};
  for (int l = 5; l <= 25; ++l) phs.hidden_channel->layers.push_back(l);
  phs_siw = phs;
  phs_siw.siw = siw.siw;
  Model& model = backend_->model();
  const int vocab = model.vocab();
  for (const Intervention& iv : {mspoe, caliope, siw, phs, phs_siw}) {
    const auto batched = backend_->run(iv, items, RunOptions{Mode::teacher_forced, 0});
    for (std::size_t i = 0; i < items.size(); ++i) {
      const PreparedPrompt prompt = backend_->prepare(items[i]);
      const auto gold = backend_->tokenizer().encode(items[i].gold, false, false);
      std::vector<hooks::TokenSpan> spans;
      for (const TokenSpan& c : prompt.chunk_tokens) spans.push_back({static_cast<int>(c.begin), static_cast<int>(c.end)});
      const int n = static_cast<int>(prompt.tokens.size());
      const hooks::EngineIntervention ei(model, iv, n, spans);
      Sequence seq(model, n + static_cast<int>(gold.size()), ei.sequence_scales());
      const int last = n - 1, zero = 0;
      std::vector<float> row = model.forward(seq, prompt.tokens, ei.prompt_positions(), std::span<const int>(&last, 1), ei.hooks());
      double logprob = 0.0;
      bool first = true;
      for (std::size_t g = 0; g < gold.size(); ++g) {
        const float top = *std::max_element(row.begin(), row.end());
        double sum = 0.0;
        for (float v : row) sum += std::exp(static_cast<double>(v) - top);
        logprob += row[gold[g]] - top - std::log(sum);
        first = first && std::max_element(row.begin(), row.end()) - row.begin() == gold[g];
        if (g + 1 < gold.size())
          row = model.forward(seq, std::span<const std::int32_t>(&gold[g], 1), {}, std::span<const int>(&zero, 1), ei.hooks());
      }
      ASSERT_EQ(static_cast<int>(row.size()), vocab);
      EXPECT_EQ(batched[i].gold_emitted_first, first) << iv.to_json().dump() << " " << items[i].id;
      EXPECT_NEAR(batched[i].gold_logprob, logprob, 2e-3) << iv.to_json().dump() << " " << items[i].id;
    }
  }
}

TEST_F(EngineBackendTest, ValidateRejectsWrongShapesAndValues) {
  Intervention bad_layers;
  bad_layers.rope_scale = {{1.0}, {1.0}};
  EXPECT_THROW(backend_->validate(bad_layers), std::invalid_argument);
  Intervention bad_heads;
  bad_heads.rope_scale.assign(30, std::vector<double>(8, 1.0));
  EXPECT_THROW(backend_->validate(bad_heads), std::invalid_argument);
  Intervention negative;
  negative.rope_scale = {{-1.0}};
  EXPECT_THROW(backend_->validate(negative), std::invalid_argument);
  Intervention lpes;
  lpes.rope_scale.assign(30, std::vector<double>{1.5});
  EXPECT_NO_THROW(backend_->validate(lpes));
  EXPECT_THROW(backend_->run(negative, kv_items(), RunOptions{}), BackendError);
}

TEST_F(EngineBackendTest, ChunkByteSpansBecomeTokenSpans) {
  BatchItem item;
  item.prompt_text = "alpha beta gamma delta";
  item.chunks = {{0, 10}, {10, 22}};
  const PreparedPrompt p = backend_->prepare(item);
  ASSERT_EQ(p.chunk_tokens.size(), 2u);
  EXPECT_EQ(p.chunk_tokens[0].begin, 0u);
  EXPECT_EQ(p.chunk_tokens[0].end, p.chunk_tokens[1].begin);
  EXPECT_EQ(p.chunk_tokens[1].end, p.tokens.size());
  item.chunks = {{5, 100}};
  EXPECT_THROW(backend_->prepare(item), BackendError);
}

}  // namespace
}  // namespace midtune::engine
