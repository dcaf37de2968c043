// Every architecture the engine runs (llama with Llama-3.1 frequency factors,
// linear RoPE scaling and a sliding window; qwen2; gemma; qwen3; gemma3;
// phi3; gemma2; mpt), on every ISA path this machine runs, on the small
// random-weight GGUFs of tests/engine/tiny_arch_gguf.hpp with real
// vocabularies (MIDTUNE_VOCAB_DIR; skipped without it):
//   - last-position logits against the fp64 numpy reference
//     (tests/reference/make_arch_fixtures.py), plain, with per-head RoPE
//     scales and with remapped positions;
//   - each feature moves the reference by more than twice the engine's
//     error (GeGLU vs SwiGLU moves gemma's logits by only ~0.2, below the
//     tolerance but twice the engine's error there; the op itself is checked
//     in engine_kernels_test);
//   - one intervention of every method (LPES, PI, Ms-PoE, CALIOPE, SIW, PHS)
//     that applies runs, stays finite and changes the logits (on mpt, which
//     has no RoPE, the RoPE methods are refused by name); PHS's against the
//     reference too (with a Q/K norm or a clamp its rows are not linear in
//     the channel), and SIW's mechanism (key 0's weight scaled) as well;
//     the RoPE methods' mechanisms are the per-head-scales and
//     remapped-positions cases above.
//
// Tolerance: the models are F32, which the engine keeps at fp32 (float
// matmul, fp32 accumulation), so logits (of order 10 here) differ from fp64
// math by float rounding only: measured below 5e-5. kLogitTolerance leaves
// room for summation order across ISAs, and stays far below the effect of any
// feature (checked in EachFeatureMovesTheReferenceBeyondTheEnginesError). The
// test prints the worst error per model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "backends/engine/engine_hooks.hpp"
#include "backends/engine/model.hpp"
#include "backends/engine/gguf/chat_template.hpp"
#include "backends/engine/gguf/tokenizer.hpp"
#include "methods/registry.hpp"
#include "tests/engine/method_examples.hpp"
#include "tests/engine/tiny_arch_gguf.hpp"
#include "tests/test_paths.hpp"

namespace midtune::engine {
namespace {

namespace fs = std::filesystem;

constexpr double kLogitTolerance = 1e-3;
constexpr double kClearMargin = 1.0;  // top-1 must agree above this reference margin
constexpr double kFeatureEffectFactor = 2;
constexpr double kNearTie = 1e-3;  // reference top-2 margin under which float rounding may pick the other

fs::path vocab_dir() {
  if (const char* env = std::getenv("MIDTUNE_VOCAB_DIR"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return home ? fs::path(home) / ".cache/midtune/llama.cpp-vocab-0.3.36" : fs::path();
}

const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in(midtune::testing::source_dir() + "/tests/reference/fixtures/arch_logits_fp32.json");
    if (!in) throw std::runtime_error("missing fixture arch_logits_fp32.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

struct Loaded {
  std::unique_ptr<::midtune::testing::MemoryFile> file;
  std::map<Isa, std::unique_ptr<Model>> models;  // per ISA path
};

// Each model is written once per process and loaded once per ISA path.
Model* tiny_model(const std::string& name, Isa isa) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    const auto specs = ::midtune::testing::tiny_arch_specs();
    const auto spec = std::find_if(specs.begin(), specs.end(), [&](const auto& s) { return s.name == name; });
    if (spec == specs.end()) throw std::logic_error("no tiny model " + name);
    const fs::path vocab_path = vocab_dir() / spec->vocab_file;
    if (!fs::exists(vocab_path)) return nullptr;
    Loaded l;
    l.file = std::make_unique<::midtune::testing::MemoryFile>(::midtune::testing::tiny_arch_gguf(*spec, GgufFile(vocab_path)));
    it = cache.emplace(name, std::move(l)).first;
  }
  std::unique_ptr<Model>& model = it->second.models[isa];
  if (!model) model = std::make_unique<Model>(it->second.file->path(), isa);
  return model.get();
}

SequenceScales scales_from(Model& model, const nlohmann::json& rows) {
  const ModelConfig& c = model.config();
  SequenceScales s = SequenceScales::ones(c.layers, c.heads);
  for (std::size_t l = 0; l < rows.size(); ++l)
    for (std::size_t h = 0; h < rows[l].size(); ++h) s.scale[l * c.heads + h] = rows[l][h].get<float>();
  return s;
}

std::vector<float> last_logits(Model& model, const std::vector<std::int32_t>& tokens, const SequenceScales& scales,
                               std::span<const double> positions = {}, const ForwardHooks* hooks = nullptr) {
  Sequence seq(model, static_cast<int>(tokens.size()) + 1, scales);
  const int last = static_cast<int>(tokens.size()) - 1;
  return model.forward(seq, tokens, positions, std::span<const int>(&last, 1), hooks);
}

// The largest |logit - reference| over a fixture case's top ids.
double worst_top_error(const std::vector<float>& logits, const nlohmann::json& cs) {
  const auto ids = cs.at("top_ids").get<std::vector<int>>();
  const auto ref = cs.at("top_logits").get<std::vector<double>>();
  double err = 0.0;
  for (std::size_t i = 0; i < ids.size(); ++i) err = std::max(err, std::fabs(logits[ids[i]] - ref[i]));
  return err;
}

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

// (model name, ISA path): every architecture on the machine's best path;
// the ones added with their own attention shaping (gemma2's soft-caps, mpt's
// ALiBi) on every path the machine runs as well.
class ArchModel : public ::testing::TestWithParam<std::tuple<std::string, Isa>> {
 protected:
  void SetUp() override {
    const Isa isa = std::get<1>(GetParam());
    if (!isa_available(isa)) GTEST_SKIP() << to_string(isa) << " not available on this CPU";
    model_ = tiny_model(name(), isa);
    if (model_ == nullptr) GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  }
  const std::string& name() const { return std::get<0>(GetParam()); }
  const nlohmann::json& cases() const { return fixture().at("models").at(name()).at("cases"); }
  // The longest plain prompt (the fixture's third case).
  const nlohmann::json& longest() const { return cases()[2]; }
  Model* model_ = nullptr;
};

TEST_P(ArchModel, ConfigComesFromTheArchitecture) {
  const ModelConfig& c = model_->config();
  const std::string& name = this->name();
  EXPECT_EQ(c.arch, fixture()["models"][name]["arch"].get<std::string>());
  EXPECT_EQ(c.rope_pairing, c.arch == "llama" || c.arch == "mpt" ? RopePairing::adjacent : RopePairing::halves);
  EXPECT_EQ(c.ffn_activation,
            c.arch.starts_with("gemma") || c.arch == "mpt" ? FfnActivation::gelu_tanh : FfnActivation::silu);
  if (name == "gemma") {
    EXPECT_EQ(c.head_dim, 256u);
    EXPECT_EQ(c.hidden, 128u);
    EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(128.0f));
    EXPECT_TRUE(c.tied_output);
  }
  if (name == "llama_swa") {
    EXPECT_EQ(c.sliding_window, 8u);
    EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.5f);
    EXPECT_FALSE(c.tied_output);
  }
  if (name == "qwen2" || name == "qwen3") {
    EXPECT_EQ(c.vocab, 151936u);
  }
  EXPECT_EQ(c.qk_norm, name == "qwen3" || name == "gemma3");
  EXPECT_EQ(c.post_norms, name == "gemma3" || name == "gemma2");
  EXPECT_EQ(c.attn_softcap, name == "gemma2" ? 4.0f : 0.0f);
  EXPECT_EQ(c.final_softcap, name == "gemma2" ? 12.0f : 0.0f);
  EXPECT_EQ(c.max_alibi_bias, name == "mpt" ? 8.0f : 0.0f);
  EXPECT_EQ(c.clamp_kqv, name == "mpt" ? 1.5f : 0.0f);
  EXPECT_EQ(c.layer_norm, name == "mpt");
  EXPECT_EQ(c.gated_ffn, name != "mpt");
  EXPECT_EQ(c.has_rope(), name != "mpt");
  if (name == "gemma2") {
    EXPECT_EQ(c.local_layers, (std::vector<std::uint8_t>{1, 0}));  // no pattern key: gemma2's period 2
    EXPECT_EQ(c.layer_window(0), 8u);
    EXPECT_EQ(c.layer_window(1), 0u);
    EXPECT_FLOAT_EQ(c.rope_base_local, c.rope_base);  // no rope.freq_base_swa: the global base, as llama.cpp
    EXPECT_FLOAT_EQ(c.rope_freq_scale_local, c.rope_freq_scale);
    EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f);
  }
  if (name == "mpt") {
    EXPECT_EQ(c.rope_dims, 0u);
    EXPECT_EQ(c.kv_heads, c.heads);
    EXPECT_TRUE(c.tied_output);
  }
  if (name == "gemma3") {
    EXPECT_EQ(c.local_layers, (std::vector<std::uint8_t>{1, 0}));  // sliding_window_pattern 2
    EXPECT_EQ(c.layer_window(0), 8u);
    EXPECT_EQ(c.layer_window(1), 0u);
    EXPECT_FLOAT_EQ(c.rope_base_local, 10000.0f);  // no rope.freq_base_swa: llama.cpp's default
    EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.125f);    // the global layers'
    EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f);
  } else if (name != "gemma2") {
    EXPECT_TRUE(c.local_layers.empty());
  }
  if (name == "qwen3") {
    EXPECT_EQ(c.head_dim, 32u);  // key_length, not hidden / heads
    EXPECT_TRUE(c.tied_output);
  }
  EXPECT_EQ(c.fused_gate_up, name == "phi3");
  if (name == "phi3") {
    EXPECT_EQ(model_->file().get_uint("phi3.attention.sliding_window"), 8u);
    EXPECT_EQ(c.sliding_window, 0u);  // switched off, as llama.cpp does for phi3
    EXPECT_EQ(c.vocab, 32064u);
    EXPECT_FALSE(c.tied_output);
  }
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / std::sqrt(static_cast<float>(c.head_dim)));
  if (name == "llama3") {
    EXPECT_EQ(c.vocab, 128256u);
  }
}

// BOS as llama.cpp adds it by default: SentencePiece and the Llama-3
// pre-tokenizer yes (the llama-bpe vocabulary file has no add_bos_token key),
// the qwen2 vocabulary (qwen2, qwen3) no. Greedy continuations matched
// llama-simple's only with this.
TEST_P(ArchModel, BosByDefaultAsLlamaCpp) {
  const Tokenizer tokenizer = Tokenizer::from_gguf(model_->file());
  EXPECT_EQ(tokenizer.add_bos_default(), !name().starts_with("qwen") && name() != "mpt");
}

// The chat template the file carries (the vocabulary's own, else the
// spec's) is read as its family's format.
TEST_P(ArchModel, ChatTemplateFromTheFile) {
  const std::map<std::string, ChatFormat> expected = {
      {"qwen2", ChatFormat::chatml}, {"llama3", ChatFormat::llama3}, {"gemma", ChatFormat::gemma},
      {"qwen3", ChatFormat::chatml}, {"gemma3", ChatFormat::gemma},  {"phi3", ChatFormat::phi3},
      {"gemma2", ChatFormat::gemma}, {"mpt", ChatFormat::chatml}};
  const auto it = expected.find(name());
  if (it == expected.end()) GTEST_SKIP() << name() << " has no chat template";
  EXPECT_EQ(to_string(ChatTemplate::from_gguf(model_->file()).format()), std::string(to_string(it->second)));
}

TEST_P(ArchModel, LogitsMatchFp64Reference) {
  const ModelConfig& c = model_->config();
  double worst = 0.0;
  for (const auto& cs : cases()) {
    const auto tokens = cs.at("tokens").get<std::vector<std::int32_t>>();
    const auto positions = cs.at("positions").get<std::vector<double>>();
    const auto logits = last_logits(*model_, tokens, scales_from(*model_, cs.at("rope_scale")), positions);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    const auto ids = cs.at("top_ids").get<std::vector<int>>();
    const auto ref = cs.at("top_logits").get<std::vector<double>>();
    double err = 0.0;
    for (std::size_t i = 0; i < ids.size(); ++i) err = std::max(err, std::fabs(logits[ids[i]] - ref[i]));
    const std::string label = name() + " " + std::to_string(tokens.size()) + " tokens " + cs.value("name", "");
    EXPECT_LT(err, kLogitTolerance) << label;
    if (ref[0] - ref[1] > kClearMargin) {
      EXPECT_EQ(argmax(logits), ids[0]) << label;
    }
    std::printf("  %-40s max |logit - fp64| = %.1e  top1 %d vs %d (margin %.3f)\n", label.c_str(), err,
                argmax(logits), ids[0], ref[0] - ref[1]);
    worst = std::max(worst, err);
  }
  std::printf("%s (%s): worst |logit - fp64 reference| %.1e, tolerance %.0e\n", name().c_str(), c.arch.c_str(),
              worst, kLogitTolerance);
}

// The reference with one feature switched off (make_arch_fixtures.py) lies
// more than twice the engine's own error away on the longest prompt, so an
// engine without that feature would be measurably farther from the reference
// than this one is.
TEST_P(ArchModel, EachFeatureMovesTheReferenceBeyondTheEnginesError) {
  const ModelConfig& c = model_->config();
  const auto& cs = longest();
  const auto tokens = cs.at("tokens").get<std::vector<std::int32_t>>();
  const auto logits = last_logits(*model_, tokens, SequenceScales::ones(c.layers, c.heads));
  const double err = worst_top_error(logits, cs);
  const auto& effects = fixture().at("models").at(name()).at("feature_effect");
  ASSERT_FALSE(effects.empty());
  for (const auto& [feature, effect] : effects.items()) {
    std::printf("  %s: switching off %s moves the reference's top logits by %.3f (engine error %.3f)\n",
                name().c_str(), feature.c_str(), effect.get<double>(), err);
    EXPECT_GT(effect.get<double>(), kFeatureEffectFactor * err) << feature;
  }
}

TEST_P(ArchModel, ChunkedPrefillAndDecodeAgreeWithOnePass) {
  const ModelConfig& c = model_->config();
  const auto tokens = longest().at("tokens").get<std::vector<std::int32_t>>();
  const SequenceScales ones = SequenceScales::ones(c.layers, c.heads);
  const auto whole = last_logits(*model_, tokens, ones);
  Sequence seq(*model_, static_cast<int>(tokens.size()), ones);
  std::vector<float> stepwise;
  const int zero = 0;
  for (std::int32_t t : tokens) {
    stepwise = model_->forward(seq, std::span<const std::int32_t>(&t, 1), {}, std::span<const int>(&zero, 1));
  }
  double diff = 0.0;
  for (std::size_t i = 0; i < whole.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(whole[i] - stepwise[i])));
  EXPECT_LT(diff, 1e-3);
}

// Teacher-forced on the fp64 reference's greedy continuation (which equals
// llama.cpp's llama-simple on these files, make_arch_fixtures.py): at every
// step the engine's argmax is the reference's, except where the reference's
// own top-2 margin is a near-tie float rounding may flip.
TEST_P(ArchModel, GreedyStepsMatchTheReferenceExceptAtNearTies) {
  const ModelConfig& c = model_->config();
  const auto& greedy = fixture().at("models").at(name()).at("greedy");
  const auto prompt = greedy.at("prompt").get<std::vector<std::int32_t>>();
  const auto expected = greedy.at("continuation").get<std::vector<std::int32_t>>();
  const auto margins = greedy.at("margins").get<std::vector<double>>();
  Sequence seq(*model_, static_cast<int>(prompt.size() + expected.size()), SequenceScales::ones(c.layers, c.heads));
  const int last = static_cast<int>(prompt.size()) - 1, zero = 0;
  auto logits = model_->forward(seq, prompt, {}, std::span<const int>(&last, 1));
  int same = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (argmax(logits) == expected[i]) {
      ++same;
    } else {
      std::printf("  %s step %zu: engine %d, reference %d (reference top-2 margin %.3f)\n", name().c_str(), i,
                  argmax(logits), expected[i], margins[i]);
      EXPECT_LT(margins[i], kNearTie) << "step " << i << " is not a near-tie";
    }
    logits = model_->forward(seq, std::span<const std::int32_t>(&expected[i], 1), {}, std::span<const int>(&zero, 1));
  }
  std::printf("%s: engine argmax = the reference greedy token at %d of %zu steps\n", name().c_str(),
              same, expected.size());
}

// One intervention of each method: finite logits that differ from the plain
// model's (each is strong enough to move a 2-layer model).
TEST_P(ArchModel, EveryMethodRunsAndChangesTheLogits) {
  const ModelConfig& c = model_->config();
  const auto tokens = longest().at("tokens").get<std::vector<std::int32_t>>();
  const int n = static_cast<int>(tokens.size());
  const std::vector<hooks::TokenSpan>& chunks = ::midtune::testing::kExampleChunks;
  const auto plain = last_logits(*model_, tokens, SequenceScales::ones(c.layers, c.heads));
  const auto& methods = ::midtune::testing::method_examples();
  for (const auto& [method, json] : methods) {
    const Intervention iv = Intervention::from_json(json);
    if (!::midtune::testing::method_applies(c, method)) {
      // Scaling or remapping RoPE positions means nothing without RoPE: refused by name.
      try {
        const hooks::EngineIntervention refused(*model_, iv, n, chunks);
        ADD_FAILURE() << method << " accepted on " << c.arch;
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(method), std::string::npos) << what;
        EXPECT_NE(what.find("no RoPE"), std::string::npos) << what;
        std::printf("  %s %-8s refused: %s\n", name().c_str(), method.c_str(), what.c_str());
      }
      continue;
    }
    const hooks::EngineIntervention ei(*model_, iv, n, chunks);
    const auto logits = last_logits(*model_, tokens, ei.sequence_scales(), ei.prompt_positions(), ei.hooks());
    double change = 0.0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      ASSERT_TRUE(std::isfinite(logits[i])) << method;
      change = std::max(change, static_cast<double>(std::fabs(logits[i] - plain[i])));
    }
    std::printf("  %s %-8s max |logit change| vs plain %.4f\n", name().c_str(), method.c_str(), change);
    if (method == "siw" && c.sliding_window != 0 && c.local_layers.empty() &&
        c.sliding_window * c.layers < static_cast<std::uint32_t>(n)) {
      // Key 0 lies outside the window of every query that reaches the last
      // one within the model's depth, so its weight cannot matter.
      EXPECT_EQ(change, 0.0) << method;
    } else {
      EXPECT_GT(change, 1e-3) << method;
    }
  }
}

// PHS's example (channel 3 of the normed input to Q and K zeroed in both
// layers: every key, the last query) against the reference's own PHS.
TEST_P(ArchModel, PhsMatchesTheFp64Reference) {
  const auto& cs = fixture().at("models").at(name()).at("phs");
  const auto tokens = cs.at("tokens").get<std::vector<std::int32_t>>();
  const hooks::EngineIntervention ei(*model_, Intervention::from_json({{"hidden_channel", cs.at("hidden_channel")}}),
                                     static_cast<int>(tokens.size()), ::midtune::testing::kExampleChunks);
  const auto logits = last_logits(*model_, tokens, ei.sequence_scales(), ei.prompt_positions(), ei.hooks());
  const double err = worst_top_error(logits, cs);
  std::printf("%s: PHS worst |logit - fp64 reference| %.1e (the channel moves the reference by %.3f)\n",
              name().c_str(), err, cs.at("effect").get<double>());
  EXPECT_LT(err, kLogitTolerance);
  EXPECT_GT(cs.at("effect").get<double>(), kFeatureEffectFactor * kLogitTolerance);
}

// The attention temperature's example (t = 0.5 in layer 1: the logits of its
// attention doubled, before the soft-cap and ALiBi's bias) against the
// reference's own (make_arch_fixtures.py), on every architecture: a factor
// on q . k needs no RoPE, so MPT takes it too.
TEST_P(ArchModel, AttentionTemperatureMatchesTheFp64Reference) {
  const auto& cs = fixture().at("models").at(name()).at("temperature");
  const auto tokens = cs.at("tokens").get<std::vector<std::int32_t>>();
  const Intervention iv = Intervention::from_json({{"attention_temperature", cs.at("attention_temperature")}});
  const auto logits = last_logits(*model_, tokens, hooks::sequence_scales(model_->config(), iv));
  const double err = worst_top_error(logits, cs);
  std::printf("%s: temperature worst |logit - fp64 reference| %.1e (it moves the reference by %.3f)\n",
              name().c_str(), err, cs.at("effect").get<double>());
  EXPECT_LT(err, kLogitTolerance);
  EXPECT_GT(cs.at("effect").get<double>(), kFeatureEffectFactor * kLogitTolerance);
}

// SelfExtend's and STRING's examples (far keys at grouped or shifted
// positions, windows shorter than llama_swa's) against the reference's own
// (make_arch_fixtures.distance_remap), on every architecture with RoPE: the
// remapped attention as two attentions merged, with each architecture's
// RoPE pairing, local bases, windows and soft-cap. Without RoPE (MPT) the
// methods are refused by name (MethodsChangeEveryArchitecture).
TEST_P(ArchModel, DistanceRemapsMatchTheFp64Reference) {
  const auto& entry = fixture().at("models").at(name());
  if (!model_->config().has_rope()) {
    EXPECT_FALSE(entry.contains("selfextend")) << "the reference remaps a model without RoPE";
    GTEST_SKIP() << name() << " has no RoPE";
  }
  for (const auto& [method, field] : {std::pair{"selfextend", "self_extend"}, std::pair{"string", "string_shift"}}) {
    const auto& cs = entry.at(method);
    const auto tokens = cs.at("tokens").get<std::vector<std::int32_t>>();
    const Intervention iv = Intervention::from_json({{field, cs.at(field)}});
    const auto logits = last_logits(*model_, tokens, hooks::sequence_scales(model_->config(), iv));
    const double err = worst_top_error(logits, cs);
    std::printf("%s: %s worst |logit - fp64 reference| %.1e (it moves the reference by %.3f)\n", name().c_str(), method,
                err, cs.at("effect").get<double>());
    EXPECT_LT(err, kLogitTolerance) << method;
    EXPECT_GT(cs.at("effect").get<double>(), kFeatureEffectFactor * kLogitTolerance) << method;
  }
  // A remap that moves nothing (SelfExtend's G 1, STRING's S = W) is the
  // plain model bit for bit, as its docs promise, not a split attention.
  const auto tokens = entry.at("selfextend").at("tokens").get<std::vector<std::int32_t>>();
  const ModelConfig& c = model_->config();
  const auto plain = last_logits(*model_, tokens, SequenceScales::ones(c.layers, c.heads));
  for (const char* identity : {R"({"self_extend": {"group": 1, "window": 5, "layers": [0, 1]}})",
                               R"({"string_shift": {"shift": 4, "window": 4, "layers": [0, 1]}})"}) {
    const Intervention iv = Intervention::from_json(nlohmann::json::parse(identity));
    EXPECT_EQ(last_logits(*model_, tokens, hooks::sequence_scales(c, iv)), plain) << identity;
  }
}

// SIW's mechanism (ForwardHooks::key0_weight_factors): key 0's weight times
// 1.8 for every query of every layer, without renormalising, against the
// reference's own (make_arch_fixtures.py); SIW's factors from the prefill's
// density are method logic on the host, the same on every architecture.
TEST_P(ArchModel, Key0WeightFactorMatchesTheFp64Reference) {
  const ModelConfig& c = model_->config();
  const auto& cs = fixture().at("models").at(name()).at("siw");
  const auto tokens = cs.at("tokens").get<std::vector<std::int32_t>>();
  const float factor = cs.at("key0_factor").get<float>();
  ForwardHooks hooks;
  hooks.key0_weight_factors = [factor](int, int, int count) { return std::vector<float>(count, factor); };
  const auto logits = last_logits(*model_, tokens, SequenceScales::ones(c.layers, c.heads), {}, &hooks);
  const double err = worst_top_error(logits, cs);
  std::printf("%s: key-0 weight x %.1f worst |logit - fp64 reference| %.1e (it moves the reference by %.3f)\n",
              name().c_str(), factor, err, cs.at("effect").get<double>());
  EXPECT_LT(err, kLogitTolerance);
  const int n = static_cast<int>(tokens.size());
  if (c.sliding_window != 0 && c.local_layers.empty() && c.sliding_window * c.layers < static_cast<std::uint32_t>(n)) {
    // Key 0 lies outside every window that reaches the last query within the
    // model's depth (llama_swa): the factor cannot matter, in the reference too.
    EXPECT_EQ(cs.at("effect").get<double>(), 0.0);
  } else {
    EXPECT_GT(cs.at("effect").get<double>(), kFeatureEffectFactor * kLogitTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ArchModel,
                         ::testing::Combine(::testing::Values("qwen2", "llama3", "gemma", "llama_swa", "qwen3",
                                                              "gemma3", "phi3", "gemma2", "mpt"),
                                            ::testing::Values(best_isa())),
                         [](const auto& info) { return std::get<0>(info.param); });
// The new attention shaping (gemma2's soft-caps, mpt's ALiBi) on every path
// this CPU runs (the best one is above as well).
INSTANTIATE_TEST_SUITE_P(EveryIsa, ArchModel,
                         ::testing::Combine(::testing::Values("gemma2", "mpt"),
                                            ::testing::Values(Isa::scalar, Isa::avx2, Isa::avx512vnni)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + to_string(std::get<1>(info.param));
                         });

// gemma3's metadata as llama.cpp's converter writes it (no pattern key, no
// freq_base_swa): five sliding layers of every six at base 10000, the
// global ones at rope.freq_base; no final-logit soft-cap unless the file
// sets one.
TEST(ArchConfig, Gemma3SlidesFiveLayersOfSix) {
  const auto header = [](bool softcap) {
    ::midtune::testing::TinyGgufWriter w;
    w.add_string("general.architecture", "gemma3");
    w.add_u32("gemma3.block_count", 12);
    w.add_u32("gemma3.context_length", 32768);
    w.add_u32("gemma3.embedding_length", 640);
    w.add_u32("gemma3.feed_forward_length", 2048);
    w.add_u32("gemma3.attention.head_count", 4);
    w.add_u32("gemma3.attention.head_count_kv", 1);
    w.add_u32("gemma3.attention.key_length", 256);
    w.add_u32("gemma3.attention.value_length", 256);
    w.add_u32("gemma3.attention.sliding_window", 512);
    w.add_u32("gemma3.vocab_size", 262144);
    w.add_f32("gemma3.rope.freq_base", 1000000.0f);
    w.add_f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
    if (softcap) w.add_f32("gemma3.final_logit_softcapping", 30.0f);
    return w.bytes();
  };
  ::midtune::testing::MemoryFile file(header(false));
  const ModelConfig c = read_model_config(GgufFile(file.path()));
  EXPECT_EQ(c.local_layers, (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(c.layer_window(4), 512u);
  EXPECT_EQ(c.layer_window(5), 0u);
  EXPECT_FLOAT_EQ(c.rope_base_local, 10000.0f);
  EXPECT_FLOAT_EQ(c.rope_base, 1000000.0f);
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / 16.0f);  // 1 / sqrt(key_length)
  EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(640.0f));
  EXPECT_EQ(c.final_softcap, 0.0f);
  EXPECT_EQ(c.attn_softcap, 0.0f);
  ::midtune::testing::MemoryFile capped(header(true));
  EXPECT_FLOAT_EQ(read_model_config(GgufFile(capped.path())).final_softcap, 30.0f);
}

// gemma2's metadata as llama.cpp reads it: without the keys, a window of
// 4096 in every other layer (the last of each pair global), soft-caps 50 and
// 30, local layers turning RoPE as the global ones; the 27B (46 layers)
// scales queries by 1/sqrt(hidden / heads); a soft-cap must be positive.
TEST(ArchConfig, Gemma2DefaultsAsLlamaCpp) {
  const auto header = [](std::uint32_t layers, float softcap) {
    ::midtune::testing::TinyGgufWriter w;
    w.add_string("general.architecture", "gemma2");
    w.add_u32("gemma2.block_count", layers);
    w.add_u32("gemma2.context_length", 8192);
    w.add_u32("gemma2.embedding_length", 4608);
    w.add_u32("gemma2.feed_forward_length", 36864);
    w.add_u32("gemma2.attention.head_count", 32);
    w.add_u32("gemma2.attention.head_count_kv", 16);
    w.add_u32("gemma2.attention.key_length", 128);
    w.add_u32("gemma2.attention.value_length", 128);
    w.add_u32("gemma2.vocab_size", 256000);
    w.add_f32("gemma2.attention.layer_norm_rms_epsilon", 1e-6f);
    w.add_string("gemma2.rope.scaling.type", "linear");
    w.add_f32("gemma2.rope.scaling.factor", 2.0f);
    if (softcap != 0.0f) w.add_f32("gemma2.attn_logit_softcapping", softcap);
    return w.bytes();
  };
  ::midtune::testing::MemoryFile file(header(46, 0.0f));
  const ModelConfig c = read_model_config(GgufFile(file.path()));
  EXPECT_EQ(c.sliding_window, 4096u);
  ASSERT_EQ(c.local_layers.size(), 46u);
  for (std::uint32_t l = 0; l < 46; ++l) EXPECT_EQ(c.local_layers[l], l % 2 == 0) << l;
  EXPECT_FLOAT_EQ(c.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c.rope_base_local, c.rope_base);
  EXPECT_FLOAT_EQ(c.rope_freq_scale_local, 0.5f);
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / 12.0f);  // 1 / sqrt(4608 / 32)
  ::midtune::testing::MemoryFile smaller(header(42, 0.0f));
  EXPECT_FLOAT_EQ(read_model_config(GgufFile(smaller.path())).attention_scale, 1.0f / std::sqrt(128.0f));
  ::midtune::testing::MemoryFile negative(header(42, -1.0f));
  try {
    read_model_config(GgufFile(negative.path()));
    FAIL() << "a negative soft-cap accepted";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("gemma2.attn_logit_softcapping"), std::string::npos) << e.what();
  }
}

// What the engine does not run of phi3 is refused by name: the 128k
// variants' LongRoPE (factor tensors, attention factor) and a gate tensor
// beside the fused gate|up; a fused attn_qkv beside attn_q/k/v too.
TEST(ArchErrors, Phi3RefusesWhatItDoesNotRunByName) {
  const fs::path vocab_path = vocab_dir() / "ggml-vocab-phi-3.gguf";
  if (!fs::exists(vocab_path)) GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  const GgufFile vocab(vocab_path);
  ::midtune::testing::TinyArchSpec spec;
  for (const auto& s : ::midtune::testing::tiny_arch_specs())
    if (s.name == "phi3") spec = s;
  ASSERT_EQ(spec.arch, "phi3");
  const auto expect_refused = [&](auto&& add, const std::string& name) {
    ::midtune::testing::TinyGgufWriter w = ::midtune::testing::tiny_arch_writer(spec, vocab);
    add(w);
    ::midtune::testing::MemoryFile file(w.bytes());
    try {
      Model model(file.path());
      ADD_FAILURE() << name << " accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file.path().string()), std::string::npos) << e.what();
    }
  };
  const std::uint64_t pairs = static_cast<std::uint64_t>(spec.head_dim / 2), hidden = spec.hidden;
  const std::uint64_t ffn = spec.ffn, q_rows = static_cast<std::uint64_t>(spec.heads) * spec.head_dim;
  for (const std::string tensor : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    expect_refused([&](auto& w) { w.add_tensor(tensor, {pairs}, 0, std::vector<std::uint8_t>(pairs * 4, 0x3f)); },
                   "'" + tensor + "'");
  }
  expect_refused([](auto& w) { w.add_f32("phi3.rope.scaling.attn_factor", 1.19f); },
                 "'phi3.rope.scaling.attn_factor'");
  const auto zeros = [](std::uint64_t count) { return std::vector<std::uint8_t>(count * 4); };
  expect_refused([&](auto& w) { w.add_tensor("blk.0.ffn_gate.weight", {hidden, ffn}, 0, zeros(hidden * ffn)); },
                 "'blk.0.ffn_gate.weight'");
  expect_refused([&](auto& w) { w.add_tensor("blk.1.attn_q.weight", {hidden, q_rows}, 0, zeros(hidden * q_rows)); },
                 "'blk.1.attn_q.weight'");
}

TEST(ArchErrors, UnsupportedArchitecturesNameTheFileValueAndSupportedList) {
  for (const std::string arch : {"falcon", "bert"}) {
    ::midtune::testing::TinyGgufWriter w;
    w.add_string("general.architecture", arch);
    ::midtune::testing::MemoryFile file(w.bytes());
    try {
      Model model(file.path());
      FAIL() << arch << " loaded";
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file.path().string()), std::string::npos) << what;
      EXPECT_NE(what.find("'" + arch + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("llama, qwen2, gemma, qwen3, gemma2, gemma3, mpt"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace midtune::engine
