// The real models of the findings against their peers (ctest label `peer`),
// one test per model: Qwen2.5-Coder-0.5B-Instruct and Qwen2.5-Coder-1.5B-
// Instruct, both Q4_K_M (`qwen2`: RoPE base 1e6, NEOX pairs, Q/K/V biases;
// the 0.5B 24 layers of 14 query heads over 2 KV heads, the 1.5B 28 layers
// of 12 over 2), fetched by `scripts/fetch_real_model.sh qwen2.5-coder-0.5b`
// and `... qwen2.5-coder-1.5b` (MIDTUNE_QWEN05_MODEL and MIDTUNE_QWEN15_MODEL
// name other copies); and Gemma 3 270M Q4_K_M (`gemma3`: 18 layers of 4
// query heads over 1, five of every six layers sliding over 512 keys with
// their own RoPE base, per-head Q/K norms), which the peer set-up fetches
// (MIDTUNE_GEMMA3_MODEL), so its test runs wherever the peer tests do.
//   - Plain greedy text against llama.cpp's llama-simple (four prompts on the
//     0.5B, two on the 1.5B and on Gemma 3), partings judged by the fp32 numpy reference as
//     for every peer file.
//   - Every method's mechanism on real weights against the independent numpy
//     reference (tests/reference/interventions_reference.py --eval, run now
//     on the file, one process for every case): last-row logits and what
//     the method decided, on KV-retrieval prompts in the model's chat
//     template built exactly as `ga-run eval` builds them (generated UUID
//     pairs, answer primed, chunk spans), LPES / PI per-layer scales, Ms-PoE
//     per-head scales under GQA (7:1, 6:1 and 4:1), SIW, CALIOPE, PHS. What
//     depends on the model (prompt sizes, layer ranges, the PHS channel,
//     the bounds) is in its ModelSpec.
// The Ms-PoE case at its paper's setting runs teacher-forced over the gold
// answer as `ga-run eval` scores it: every gold row's logits against the
// reference's, and both scores printed. On the 0.5B it runs on a 20-pair
// prompt, the length where `ga-run eval` saw that setting take the model
// from ~100 % to 0 % correct. Measured: plain correct in both; under Ms-PoE
// both miss the gold at its second token (log-p -141.5 engine, -137.5
// reference), the argmax identical in every row that is not a near-tie. On
// the 1.5B (3 pairs, on the engine's fp32-weights path, see kQwen15): plain
// correct in both; under Ms-PoE both miss from the third gold token on
// (log-p -80.098 in both), every head's ratio the reference's. On Gemma 3
// (10 pairs, gold in the middle, fp32-weights path): plain wrong in both
// (log-p -5.517: this model answers the first pair), under Ms-PoE both miss
// from the second gold token (log-p -46.833 in both). So that collapse is
// the model's response to the method, not the engine's.
//
// Without its model file a model's test is skipped (the files are opt-in
// fetches, also under CI); with it, missing peers skip it, or fail it under
// CI=true.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/engine/engine_backend.hpp"
#include "backends/engine/engine_hooks.hpp"
#include "backends/engine/gguf/chat_template.hpp"
#include "backends/engine/gguf/tokenizer.hpp"
#include "backends/engine/model.hpp"
#include "core/bezier/curve.hpp"
#include "datasets/kv_retrieval.hpp"
#include "datasets/prompts.hpp"
#include "methods/intervention.hpp"
#include "tests/engine/peer_support.hpp"
#include "tests/test_paths.hpp"

namespace midtune::engine {
namespace {

using namespace ::midtune::engine::peer;  // NOLINT: the peer tests' shared helpers
using json = nlohmann::json;

// The folder scripts/fetch_real_model.sh writes to.
fs::path cache_dir() {
  if (const char* c = std::getenv("MIDTUNE_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "midtune";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache/midtune";
  return {};
}

// `env` names another copy; otherwise the cache.
fs::path model_path(const char* env_name, const std::string& file_name) {
  if (const char* env = std::getenv(env_name); env && *env) return env;
  return cache_dir() / file_name;
}

// Plain text, code (a coder model), and a ChatML turn (its markers are
// special tokens, parsed as llama-simple parses them).
const std::vector<std::string> kGreedyPrompts = {
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a land far away, there lived a",
};
constexpr int kGreedyTokens = 16;
// A reference top-2 margin below this is a near-tie (as for every quantised
// peer file: engine and llama.cpp each sit up to ~1 logit from the fp32
// reference).
constexpr double kNearTie = 1.0;

// The checks and their bounds. Every figure quoted was measured on the AVX2
// path (the one with the larger int8 errors on SmolLM2; AVX-512 sat at ~0.7x
// of them there); each model's own bounds and figures are in its
// ModelSpec below.
//
// Plain rows: worst |engine - fp32 reference| over all 151936 logits of
// every plain row (greedy prompts, the KV prompts, the gold rows), bounded by
// the spec's plain_tolerance. The engine's int8 activations (llama.cpp's
// too) dominate it; Qwen's logits sit much closer to the reference than
// SmolLM2's (1.4) or Gemma 3's (1.0).
// The method checks, as tests/engine/intervention_model_test.cpp: on the
// reference's top-20 ids of each row, |engine - reference| and the error of
// the method's effect (with - plain on the same ids), bounded by the spec's
// logit_tolerance (mspoe_tolerance for the Ms-PoE paper setting, which ranks
// heads by a threshold count); top-1 must agree where the reference's top-2
// margin exceeds kTopMargin. Each case must move the reference by more than
// its bound (checked below), so a hook that did nothing fails.
constexpr double kTopMargin = 0.5;
// Ms-PoE's awareness counts keys whose weight exceeds alpha / n (eq. 1): on
// the 0.5B at n = 1461 that threshold is 0.2 % of the attention, and the int8
// activations move weights across it (measured: 237 of 308 heads within one
// key, worst 6 keys = 0.41 % of n; at n = 515, worst 3 = 0.58 %; on the
// 1.5B at n = 312, worst 2 = 0.64 %). On the engine's fp32 path (Model's
// fp32_weights) every count and every ratio equalled the reference's on
// both models, the logits within 5e-5 (0.5B) and 1e-4 (1.5B), so these are
// the int8 activations' differences, not the method's: counts within
// kCountSlack x n keys (at least one) for kCountAgreement of heads.
constexpr double kCountSlack = 0.006;
constexpr double kCountAgreement = 0.95;
constexpr double kDecisionAgreement = 0.6;  // layers with an identical SIW dense set
constexpr int kTopK = 20;

// A KV-retrieval prompt as `ga-run eval` makes it (datasets/slice.cpp):
// generated UUID pairs, the gold pair moved to `gold`, the Lost-in-the-Middle
// template in the model's chat template, the answer primed.
struct KvPrompt {
  std::string name;
  std::vector<std::int32_t> tokens;
  std::vector<hooks::TokenSpan> chunks;
  std::vector<std::int32_t> gold;  // the gold value's tokens, as teacher_forced scores them
};

KvPrompt make_kv_prompt(const Model& model, const Tokenizer& tokenizer, std::size_t pairs, std::size_t gold,
                        std::uint64_t seed) {
  const datasets::KvItem base = datasets::generate_kv_item(seed, pairs, "kv-gen:peer:" + std::to_string(seed));
  const datasets::KvItem moved = datasets::with_gold_at(base, gold);
  const ChatTemplate chat = ChatTemplate::from_gguf(model.file());
  const datasets::PromptWrapper wrapper =
      datasets::chat_wrapper("chat-template", [&chat](const std::string& m) { return chat.render_user(m); });
  const BatchItem item = datasets::make_batch_item(datasets::kv_prompt(moved.records, moved.key), wrapper, "peer",
                                                   datasets::kv_answer_start(base.key, base.value, true),
                                                   static_cast<double>(gold) / static_cast<double>(pairs - 1));
  const PreparedPrompt prepared = prepare_prompt(tokenizer, item);
  return {std::to_string(pairs) + " pairs, gold at " + std::to_string(gold), prepared.tokens, hook_spans(prepared),
          tokenizer.encode(item.gold, false, false)};
}

// teacher_forced: the prompt and the gold answer's inputs, scored row by row
// as `ga-run eval` scores them (EngineBackend's teacher_forced mode);
// otherwise the prompt's last row only. fp32: on the engine's fp32-weights
// path (backend.precision fp32), without its int8 activations.
struct MethodCase {
  std::string name;
  const KvPrompt* prompt;
  json intervention;
  double tolerance;
  bool teacher_forced = false;
  bool fp32 = false;
};

json mspoe(double lo, double hi) {
  return {{"min_ratio", lo}, {"max_ratio", hi},      {"first_layer", 2},
          {"alpha", 3.0},    {"order", "awareness"}, {"reference_spacing", false}};
}

json int_list(int first, int last) {
  json out = json::array();
  for (int l = first; l <= last; ++l) out.push_back(l);
  return out;
}

// interventions_reference.py --eval on every case: last-row logits (one
// vocab-long row per case) and its decisions. The reference takes minutes
// on 2 cores, so its results are kept in the cache folder
// (reference-results/, per model file and case) and a case's are reused
// while it, the model file, the reference's sources and numpy are
// unchanged (the script's cache_folder and case_key); the engine side
// always runs. The tiny models'
// intervention tests run the same reference code afresh every time.
// MIDTUNE_REFERENCE_CACHE=off computes it afresh here too.
struct Reference {
  std::vector<std::vector<std::vector<double>>> logits;  // per case, per scored row
  json decisions;
  double seconds = 0;
  std::string cache;             // the cache folder, if one was used
  std::size_t cached_cases = 0;  // the cases answered from it
};

bool reference_cache_on() {
  const char* env = std::getenv("MIDTUNE_REFERENCE_CACHE");
  return !(env && std::string(env) == "off") && !cache_dir().empty();
}

Reference run_reference(const fs::path& model, const json& cases, std::size_t vocab) {
  ScratchDir dir;
  const fs::path in = dir.path() / "cases.json", logits = dir.path() / "logits.f64",
                 decisions = dir.path() / "decisions.json";
  std::ofstream(in) << cases.dump();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> args = {
      python().string(), midtune::testing::source_dir() + "/tests/reference/interventions_reference.py", "--eval",
      in.string(), "--model", model.string(), "--logits", logits.string(), "--decisions", decisions.string(),
      // Both cores: the test holds both ctest slots (label peer), so
      // nothing else runs beside the reference's matmuls.
      "--threads", "2"};
  if (reference_cache_on()) {
    args.push_back("--cache");
    args.push_back((cache_dir() / "reference-results").string());
  }
  const Finished run = run_process(args, dir.path().string());
  if (run.exit_code != 0) throw std::runtime_error("interventions_reference.py --eval failed: " + describe(run));
  Reference out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.decisions = json::parse(std::ifstream(decisions));
  out.cache = out.decisions.value("cache", "");
  out.cached_cases = out.decisions.value("cached_cases", std::size_t{0});
  std::ifstream f(logits, std::ios::binary);
  for (const json& decided : out.decisions.at("cases")) {
    auto& rows = out.logits.emplace_back(decided.at("rows").get<std::size_t>(), std::vector<double>(vocab));
    for (auto& row : rows) f.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(vocab * 8));
  }
  if (out.logits.size() != cases.at("cases").size() || !f || f.peek() != std::char_traits<char>::eof())
    throw std::runtime_error(logits.string() + ": not the rows of float64 logits decisions.json lists");
  return out;
}

std::vector<int> top_ids(const std::vector<double>& logits, int k) {
  std::vector<int> order(logits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  order.resize(static_cast<std::size_t>(k));
  return order;
}

template <typename T>
double log_softmax_at(const std::vector<T>& logits, int id) {
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const T v : logits) sum += std::exp(static_cast<double>(v) - top);
  return static_cast<double>(logits[id]) - top - std::log(sum);
}

// The prompt alone (the hooks read its last query), then, teacher-forced,
// every gold input in one call, as EngineBackend's teacher_forced mode runs
// an intervention that reads the whole prompt: one row of logits per gold
// token.
std::vector<std::vector<float>> engine_rows(Model& model, const KvPrompt& p, const hooks::EngineIntervention& ei,
                                            bool teacher_forced) {
  const int n = static_cast<int>(p.tokens.size()), last = n - 1;
  const std::size_t vocab = model.config().vocab;
  Sequence seq(model, n + static_cast<int>(p.gold.size()), ei.sequence_scales());
  std::vector<float> flat =
      model.forward(seq, p.tokens, ei.prompt_positions(), std::span<const int>(&last, 1), ei.hooks());
  if (teacher_forced && p.gold.size() > 1) {
    const std::span<const std::int32_t> inputs(p.gold.data(), p.gold.size() - 1);
    std::vector<int> rows(inputs.size());
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int>(i);
    const std::vector<float> steps = model.forward(seq, inputs, {}, rows, ei.hooks());
    flat.insert(flat.end(), steps.begin(), steps.end());
  }
  std::vector<std::vector<float>> out;
  for (std::size_t r = 0; r < flat.size() / vocab; ++r)
    out.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                     flat.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
  return out;
}

// Teacher-forced score of the gold rows, as EngineBackend computes it:
// correct when every gold token is its row's argmax; the summed log-prob.
struct GoldScore {
  bool correct = true;
  int first_miss = -1;  // the first gold token that is not its row's argmax
  double logprob = 0;
};

template <typename T>
GoldScore gold_score(const std::vector<std::vector<T>>& rows, const std::vector<std::int32_t>& gold) {
  GoldScore s;
  for (std::size_t i = 0; i < rows.size() && i < gold.size(); ++i) {
    if (argmax(rows[i]) != gold[i] && s.correct) {
      s.correct = false;
      s.first_miss = static_cast<int>(i);
    }
    s.logprob += log_softmax_at(rows[i], gold[i]);
  }
  return s;
}

// What differs between the models: the file, its shape, the prompts, the
// settings that depend on the layer count or the hidden state, the bounds.
struct KvSpec {
  std::size_t pairs, gold;
  std::uint64_t seed;
  bool operator==(const KvSpec&) const = default;
};

struct ModelSpec {
  std::string name;       // the gtest parameter's name
  std::string title;      // in the skip message
  std::string fetch;      // scripts/fetch_real_model.sh's name, the greedy label
  const char* env;        // names another copy of the file
  std::string file_name;  // in the cache
  std::uint32_t layers, heads, kv_heads, hidden;
  std::vector<int> greedy;  // which of kGreedyPrompts
  // The teacher-forced cases (plain and Ms-PoE at its paper setting) run on
  // `verdict`, every other case on `methods`; equal specs share one prompt.
  KvSpec verdict, methods;
  // Those two cases on the engine's fp32-weights path, bounded by
  // fp32_tolerance (the int8 path's plain rows are checked beside them).
  bool verdict_fp32 = false;
  double pi_scale;  // PI on every layer
  // Ms-PoE with every head at one ratio; the attention temperature on the
  // second half of the layers: settings that move the reference beyond the
  // bound (Gemma 3's int8 errors are larger, so its bound and settings are).
  double mspoe_equal_ratio = 1.2;
  double temperature = 0.8;
  double siw_dense, siw_sparse;  // SIW's alphas
  // PHS's channel: the one with the largest mean |x| over the `methods`
  // prompt's tokens and the PHS layers, x the layer's RMS-normed FFN input
  // (ffn_norm's output), measured once with the reference's forward pass.
  // That reading of "the largest normed input" gives the 0.5B's 646 (mean
  // 7.75 against 5.35 for the next, 173); at the attention's normed input,
  // the one PHS scales, the largest is another channel (173 on the 0.5B,
  // 1424 on the 1.5B, which moves the 1.5B's reference by 5.6 at -1). The
  // check needs only a setting that moves the reference beyond the bound.
  int phs_channel;
  double phs_scale;
  double plain_tolerance, logit_tolerance, mspoe_tolerance;
  double fp32_tolerance = 0;
};

const ModelSpec kQwen05 = {
    .name = "Qwen05B",
    .title = "Qwen2.5-Coder-0.5B-Instruct",
    .fetch = "qwen2.5-coder-0.5b",
    .env = "MIDTUNE_QWEN05_MODEL",
    .file_name = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    .layers = 24,
    .heads = 14,
    .kv_heads = 2,
    .hidden = 896,
    .greedy = {0, 1, 2, 3},
    // Ms-PoE's verdict on 20 pairs, the length where `ga-run eval` saw the
    // paper setting take the model from ~100 % to 0 % correct; the other
    // methods on 6 pairs (a few hundred tokens), so the reference's forward
    // passes stay within the test's time.
    .verdict = {20, 10, 2026},
    .methods = {6, 3, 7},
    .pi_scale = 1.2,
    // 1.5 / 0.5 in layers 4-19 moved the reference by 0.25 only.
    .siw_dense = 0.5,
    .siw_sparse = 3.0,
    // Times -1, the paper's grid value for Llama-2-7B (its factor 0 moved
    // the reference by 0.75 here).
    .phs_channel = 646,
    .phs_scale = -1.0,
    // Plain: measured worst 0.372, about 2.7x that allowed. Methods: measured
    // worst 0.146 (PI, LPES, Ms-PoE with equal ratios, SIW, CALIOPE, PHS on
    // 515 tokens), tighter than the 1.5 of the small-model tests, as at 1.5
    // a hook that did nothing would pass PI 1.2, whose reference moves by
    // only ~1.0. Ms-PoE at the paper setting, the small-model tests' 2.0:
    // measured 0.84 over the 31 gold rows of the 20-pair prompt, whose int8
    // counts swap the ratios of near-tied heads in 15 of 22 layers while the
    // reference's logits move by 17.
    .plain_tolerance = 1.0,
    .logit_tolerance = 0.5,
    .mspoe_tolerance = 2.0,
};

const ModelSpec kQwen15 = {
    .name = "Qwen15B",
    .title = "Qwen2.5-Coder-1.5B-Instruct",
    .fetch = "qwen2.5-coder-1.5b",
    .env = "MIDTUNE_QWEN15_MODEL",
    .file_name = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    .layers = 28,
    .heads = 12,
    .kv_heads = 2,
    .hidden = 1536,
    // Each token passes ~3.6x the 0.5B's weights, so two greedy prompts and
    // one 3-pair prompt (312 tokens, 33 gold tokens) for every case.
    .greedy = {0, 2},
    .verdict = {3, 1, 7},
    .methods = {3, 1, 7},
    // Ms-PoE's paper setting on the fp32-weights path: on the int8 path its
    // awareness counts sat within 2 keys of the reference's in 312 of 312
    // heads, yet that swapped the ratios of near-tied heads (61 head ratios
    // in 15 of 26 layers), the logits off by up to 4.0 and one top-1 at a
    // reference margin of 0.73; on the fp32 path every count and ratio
    // equalled the reference's and every logit agreed within 1e-4. So the
    // ranking is checked where it is exact; Ms-PoE on the int8 path under
    // GQA by the equal-ratio case.
    .verdict_fp32 = true,
    .pi_scale = 1.2,
    .siw_dense = 0.5,
    .siw_sparse = 3.0,
    // Channel 1248: mean 3.81 in layers 8-21, against 3.16 for the next,
    // 969. Times -3, stronger than the 0.5B's -1, which moved the
    // reference by 0.64 only, barely beyond the bound (-2: 0.89, -3: 1.08,
    // -4: 1.16, the reference alone).
    .phs_channel = 1248,
    .phs_scale = -3.0,
    // Plain: measured worst 0.284 over all logits of the 33 KV rows (0.186
    // on the greedy prompts), 2.8x that allowed. Methods: measured worst
    // 0.211 (the plain gold rows' top-20; effects at most 0.167), 2.4x, and
    // every case moves the reference by 1.08 or more. The fp32 path: measured
    // worst 1.04e-4 (Ms-PoE's effect; plain 4.96e-5 over all logits), 10x
    // that allowed for other ISAs' summation order, while one swapped ratio
    // moves logits by 0.1 to 4. mspoe_tolerance: unused, the paper setting
    // runs on the fp32 path.
    .plain_tolerance = 0.8,
    .logit_tolerance = 0.5,
    .mspoe_tolerance = 0,
    .fp32_tolerance = 1e-3,
};

const ModelSpec kGemma3 = {
    .name = "Gemma3_270M",
    .title = "Gemma 3 270M",
    .fetch = "gemma3-270m",
    .env = "MIDTUNE_GEMMA3_MODEL",
    .file_name = "gemma-3-270m-q4_k_m.gguf",
    .layers = 18,
    .heads = 4,
    .kv_heads = 1,
    .hidden = 640,
    // The plain-text prompts (Gemma's turns are not ChatML).
    .greedy = {0, 3},
    // Every case on the findings' own setting (docs/findings.md): 10 pairs,
    // ~820 tokens, longer than the local layers' 512-key window, where
    // CALIOPE's paper setting took the gold's log-probability down by ~120
    // nats; the gold in the middle. One prompt for every case.
    .verdict = {10, 4, 2027},
    .methods = {10, 4, 2027},
    // Ms-PoE's paper setting on the fp32-weights path, as on the 1.5B: 4
    // heads rank on counts that int8 activations move across near-ties.
    .verdict_fp32 = true,
    .pi_scale = 1.5,
    .mspoe_equal_ratio = 2.0,
    .temperature = 2.0,
    .siw_dense = 0.5,
    .siw_sparse = 3.0,
    // The channel search's first (ga-run phs-search, experiments/findings/
    // gemma3-kv10-phs.yaml); x -1 moved the reference by 0.44 only.
    .phs_channel = 354,
    .phs_scale = -8.0,
    // Plain: measured worst 2.13 (AVX-512) and 2.40 (AVX2) over all logits of
    // the 31 gold rows, Gemma's int8 errors being larger than Qwen's (its
    // greedy prompts: 0.59). Methods: measured worst 0.72 (logits) and 0.88
    // (effects) over both paths, 1.6x under the bound; the settings are
    // stronger than Qwen's as this model's last row moves less (PI 1.5
    // moves it by 1.91, the LPES curve by 1.50, temperature 0.6 by 0.93
    // only). The fp32 path: measured worst 3.0e-4 (plain over all logits).
    .plain_tolerance = 3.0,
    .logit_tolerance = 1.4,
    .mspoe_tolerance = 0,
    .fp32_tolerance = 1e-3,
};

// gtest's listing (and ctest's) names the model, not its bytes.
void PrintTo(const ModelSpec& spec, std::ostream* os) { *os << spec.title; }

class RealModel : public ::testing::TestWithParam<ModelSpec> {};

// One test per model, as loading the reference (dequantising every weight)
// is a large part of its time: greedy text against llama-simple, then one
// reference run for the plain prompts, the partings and every method case.
TEST_P(RealModel, GreedyMatchesLlamaSimpleAndEveryMethodTheNumpyReference) {
  const ModelSpec& spec = GetParam();
  const fs::path file = model_path(spec.env, spec.file_name);
  if (!fs::exists(file)) {
    GTEST_SKIP() << spec.title << " not found at " << file << " (scripts/fetch_real_model.sh " << spec.fetch
                 << " fetches it; " << spec.env << " names another copy)";
  }
  REQUIRE_PEERS(python(), llama_simple());
  const auto test_start = std::chrono::steady_clock::now();

  std::vector<std::string> greedy_texts;
  for (int i : spec.greedy) greedy_texts.push_back(kGreedyPrompts.at(static_cast<std::size_t>(i)));
  const auto partings = compare_greedy(file, spec.fetch, greedy_texts, kGreedyTokens, spec.greedy);

  Model model(file);
  const ModelConfig& c = model.config();
  ASSERT_EQ(c.layers, spec.layers);
  ASSERT_EQ(c.heads, spec.heads);
  ASSERT_EQ(c.kv_heads, spec.kv_heads);
  ASSERT_EQ(c.hidden, spec.hidden);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const int layers = static_cast<int>(c.layers);

  // The cases' prompts (a case's plain rows are found by its prompt's address).
  const bool one_prompt = spec.verdict == spec.methods;
  const KvPrompt verdict_kv =
      make_kv_prompt(model, tokenizer, spec.verdict.pairs, spec.verdict.gold, spec.verdict.seed);
  const KvPrompt other_kv =
      one_prompt ? KvPrompt{}
                 : make_kv_prompt(model, tokenizer, spec.methods.pairs, spec.methods.gold, spec.methods.seed);
  const KvPrompt& methods_kv = one_prompt ? verdict_kv : other_kv;
  std::printf("KV prompts: %s: %zu tokens, %zu chunks, %zu gold tokens", verdict_kv.name.c_str(),
              verdict_kv.tokens.size(), verdict_kv.chunks.size(), verdict_kv.gold.size());
  if (!one_prompt)
    std::printf("; %s: %zu tokens, %zu chunks", methods_kv.name.c_str(), methods_kv.tokens.size(),
                methods_kv.chunks.size());
  std::printf("\n");

  // LPES: a degree-3 Bezier curve in the paper's 1.0-2.0 range, sampled per
  // layer (LPES eq. 3, 5, 6), its control points spread over x in
  // [0, layers - 1] (0, 8, 15, 23 on 24 layers; 0, 9, 18, 27 on 28).
  const auto third = [&](int k) { return static_cast<double>(std::lround(k * (layers - 1) / 3.0)); };
  const std::vector<bezier::ControlPoint> points = {{0, 1.0}, {third(1), 1.9}, {third(2), 1.1}, {third(3), 1.6}};
  json lpes = json::array();
  for (double s : bezier::sample_layer_scales(bezier::CurveKind::bezier, points, layers))
    lpes.push_back(json::array({s}));

  // SIW: layers 2-21 of 24 scaled to the model (rounded down: 2-24 of 28),
  // strong enough to move the reference beyond the tolerance. PHS: the
  // paper's layers 10-25 of 32 scaled likewise (7-18 of 24, 8-21 of 28;
  // phs_paper_layers rounds to the nearest, 8-19 and 9-22).
  const int siw_first = 2 * layers / 24, siw_last = 21 * layers / 24;
  const int phs_first = 10 * layers / 32, phs_last = 25 * layers / 32;
  const auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  const auto range = [](int first, int last) { return std::to_string(first) + "-" + std::to_string(last); };
  const std::string verdict_how =
      std::to_string(spec.verdict.pairs) + " pairs, teacher-forced" + (spec.verdict_fp32 ? ", fp32 weights" : "");
  const double verdict_tolerance = spec.verdict_fp32 ? spec.fp32_tolerance : spec.logit_tolerance;
  std::vector<MethodCase> methods = {
      {"plain (" + verdict_how + ")", &verdict_kv, json::object(), verdict_tolerance, true, spec.verdict_fp32},
      {"Ms-PoE 1.2-1.8 from layer 2 (paper; " + verdict_how + ")",
       &verdict_kv,
       {{"mspoe", mspoe(1.2, 1.8)}},
       spec.verdict_fp32 ? spec.fp32_tolerance : spec.mspoe_tolerance,
       true,
       spec.verdict_fp32},
  };
  // The int8 path's plain rows of the other cases' prompt (teacher-forced
  // where that is the verdict's prompt: the reference computes it once),
  // bounded as every plain row is.
  if (!one_prompt || spec.verdict_fp32)
    methods.push_back(
        {"plain (" + std::to_string(spec.methods.pairs) + " pairs" + (one_prompt ? ", teacher-forced)" : ")"),
         &methods_kv, json::object(), spec.plain_tolerance, one_prompt});
  const std::vector<MethodCase> more = {
      {"PI " + num(spec.pi_scale) + " on every layer",
       &methods_kv,
       {{"rope_scale", json::array({json::array({spec.pi_scale})})}},
       spec.logit_tolerance},
      {"LPES Bezier curve 1.0-1.9", &methods_kv, {{"rope_scale", lpes}}, spec.logit_tolerance},
      // Equal ratios: no ranking to swap, so the tighter bound.
      {"Ms-PoE every ratio " + num(spec.mspoe_equal_ratio),
       &methods_kv,
       {{"mspoe", mspoe(spec.mspoe_equal_ratio, spec.mspoe_equal_ratio)}},
       spec.logit_tolerance},
      {"SIW dense " + num(spec.siw_dense) + " sparse " + num(spec.siw_sparse) + ", layers " +
           range(siw_first, siw_last),
       &methods_kv,
       {{"siw",
         {{"alpha_dense", spec.siw_dense},
          {"alpha_sparse", spec.siw_sparse},
          {"sigma", 1.0},
          {"layers", int_list(siw_first, siw_last)}}}},
       spec.logit_tolerance},
      {"CALIOPE Moses gap 10000",
       &methods_kv,
       {{"position_map", {{"kind", "moses"}, {"gap", 10000.0}}}},
       spec.logit_tolerance},
      {"CALIOPE Hourglass 5-1000",
       &methods_kv,
       {{"position_map", {{"kind", "hourglass"}, {"delta_min", 5.0}, {"delta_max", 1000.0}}}},
       spec.logit_tolerance},
      {"PHS channel " + std::to_string(spec.phs_channel) + " x " + num(spec.phs_scale) + ", layers " +
           range(phs_first, phs_last),
       &methods_kv,
       {{"hidden_channel",
         {{"channel", spec.phs_channel}, {"scale", spec.phs_scale}, {"layers", int_list(phs_first, phs_last)}}}},
       spec.logit_tolerance},
      // Logits / 0.8 in the second half of the layers: every query's
      // attention sharper there, on prompt and answer rows alike.
      {"attention temperature " + num(spec.temperature) + ", layers " + range(layers / 2, layers - 1),
       &methods_kv,
       {{"attention_temperature", {{"temperature", spec.temperature}, {"layers", int_list(layers / 2, layers - 1)}}}},
       spec.logit_tolerance},
      // The two distance remaps on every layer, with windows well inside
      // the short prompt (3 or 6 pairs, 150-300 tokens): most keys of the
      // later queries are far (grouped by 4, or moved down by 64 - 8).
      {"SelfExtend group 4, window 32, every layer",
       &methods_kv,
       {{"self_extend", {{"group", 4}, {"window", 32}, {"layers", int_list(0, layers - 1)}}}},
       spec.logit_tolerance},
      {"STRING shift 64, window 8, every layer",
       &methods_kv,
       {{"string_shift", {{"shift", 64}, {"window", 8}, {"layers", int_list(0, layers - 1)}}}},
       spec.logit_tolerance},
      // A remap composed with per-layer RoPE scales: the far positions are
      // divided by each layer's scale, as every rotation is.
      {"LPES curve + SelfExtend group 4, window 32",
       &methods_kv,
       {{"rope_scale", lpes}, {"self_extend", {{"group", 4}, {"window", 32}, {"layers", int_list(0, layers - 1)}}}},
       spec.logit_tolerance},
  };
  methods.insert(methods.end(), more.begin(), more.end());

  // Every case for the one reference run: the greedy prompts, the partings'
  // agreed prefixes, then the method cases.
  json cases = json::array();
  std::vector<std::vector<std::int32_t>> greedy_prompts;
  for (const auto& p : greedy_texts) greedy_prompts.push_back(tokenizer.encode(p, tokenizer.add_bos_default(), true));
  for (const auto& t : greedy_prompts) cases.push_back({{"name", "greedy prompt"}, {"tokens", t}});
  for (const auto& t : agreed_prefixes(partings)) cases.push_back({{"name", "parting"}, {"tokens", t}});
  // A case the reference already has (the same tokens, chunks and
  // intervention on both engine paths) is computed once.
  std::vector<std::size_t> ref_case;
  std::map<std::string, std::size_t> computed;
  for (const MethodCase& m : methods) {
    json chunks = json::array();
    for (const auto& s : m.prompt->chunks) chunks.push_back({s.begin, s.end});
    std::vector<std::int32_t> tokens = m.prompt->tokens;
    json one = {{"chunks", chunks}, {"intervention", m.intervention}};
    if (m.teacher_forced) {
      one["prompt_tokens"] = tokens.size();
      tokens.insert(tokens.end(), m.prompt->gold.begin(), m.prompt->gold.end() - 1);
    }
    one["tokens"] = tokens;
    const auto [at, added] = computed.emplace(one.dump(), cases.size());
    ref_case.push_back(at->second);
    if (added) {
      one["name"] = m.name;
      cases.push_back(std::move(one));
    }
  }
  const Reference ref = run_reference(file, json{{"cases", cases}}, c.vocab);
  std::printf("reference: %zu cases in %.1f s (loading %.1f s)", cases.size(), ref.seconds,
              ref.decisions.at("load_seconds").get<double>());
  if (!ref.cache.empty())
    std::printf(
        ", %zu of them from %s, as computed before on the same inputs "
        "(MIDTUNE_REFERENCE_CACHE=off computes every case again)",
        ref.cached_cases, ref.cache.c_str());
  std::printf("\n");

  // Greedy partings, and the plain greedy prompts' logits.
  const std::size_t greedy = greedy_prompts.size();
  std::vector<std::vector<double>> last_rows;
  for (const auto& rows : ref.logits) last_rows.push_back(rows.front());
  expect_near_ties(partings,
                   {last_rows.begin() + static_cast<std::ptrdiff_t>(greedy),
                    last_rows.begin() + static_cast<std::ptrdiff_t>(greedy + partings.size())},
                   kNearTie);
  const LogitComparison plain = compare_logits(
      model, greedy_prompts, {last_rows.begin(), last_rows.begin() + static_cast<std::ptrdiff_t>(greedy)});
  std::printf(
      "plain greedy prompts: worst |engine - fp32 reference| %.3f over all logits (tolerance %.2f), "
      "top-1 kept %d/%zu\n",
      plain.worst, spec.plain_tolerance, plain.top1_kept, greedy);
  EXPECT_LT(plain.worst, spec.plain_tolerance);

  // Every method case, row by row, against the plain rows of its prompt on
  // the same engine path for the effect. The fp32-weights model is loaded
  // for its cases only, once the reference has exited (their memory would
  // add up).
  std::map<std::pair<const KvPrompt*, bool>,
           std::pair<std::vector<std::vector<float>>, std::vector<std::vector<double>>>>
      plain_of;
  std::unique_ptr<Model> fp32_model;
  for (std::size_t i = 0; i < methods.size(); ++i) {
    const MethodCase& m = methods[i];
    if (m.fp32 && !fp32_model) {
      const auto load_start = std::chrono::steady_clock::now();
      fp32_model = std::make_unique<Model>(file, best_isa(), true);
      std::printf("fp32-weights model loaded in %.1f s\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
    } else if (!m.fp32 && fp32_model) {
      fp32_model.reset();
    }
    Model& engine = m.fp32 ? *fp32_model : model;
    const auto& want = ref.logits[ref_case[i]];
    const json& decided = ref.decisions.at("cases").at(ref_case[i]);
    const int n = static_cast<int>(m.prompt->tokens.size());
    const hooks::EngineIntervention ei(engine, Intervention::from_json(m.intervention), n, m.prompt->chunks);
    const auto got = engine_rows(engine, *m.prompt, ei, m.teacher_forced);
    ASSERT_EQ(got.size(), want.size()) << m.name;
    if (m.intervention.empty()) {
      plain_of[{m.prompt, m.fp32}] = {got, want};
      double all = 0;
      for (std::size_t r = 0; r < got.size(); ++r)
        for (std::size_t t = 0; t < got[r].size(); ++t) all = std::max(all, std::fabs(got[r][t] - want[r][t]));
      const double bound = m.fp32 ? m.tolerance : spec.plain_tolerance;
      std::printf("%-48s worst |engine - reference| over all logits of %zu rows %.3g (tolerance %.2g)\n",
                  m.name.c_str(), got.size(), all, bound);
      EXPECT_LT(all, bound) << m.name;
    }
    const auto& [engine_plain, ref_plain] = plain_of.at({m.prompt, m.fp32});
    double err = 0, effect_err = 0, moved = 0;
    int top1_checked = 0, top1_same = 0;
    for (std::size_t r = 0; r < got.size(); ++r) {
      const std::vector<int> ids = top_ids(want[r], kTopK);
      for (int id : ids) {
        err = std::max(err, std::fabs(got[r][id] - want[r][id]));
        effect_err =
            std::max(effect_err, std::fabs((got[r][id] - engine_plain[r][id]) - (want[r][id] - ref_plain[r][id])));
        moved = std::max(moved, std::fabs(want[r][id] - ref_plain[r][id]));
      }
      if (want[r][ids[0]] - want[r][ids[1]] > kTopMargin) {
        ++top1_checked;
        top1_same += argmax(got[r]) == ids[0] ? 1 : 0;
        EXPECT_EQ(argmax(got[r]), ids[0]) << m.name << " row " << r << ": top-1 differs at a reference margin of "
                                          << want[r][ids[0]] - want[r][ids[1]];
      }
    }
    std::printf(
        "%-48s |logit - ref| %.3g  |effect - ref effect| %.3g (tolerance %.2g)  reference moved %.2f  "
        "top-1 same in %d of %d rows with margin > %.1f\n",
        m.name.c_str(), err, effect_err, m.tolerance, moved, top1_same, top1_checked, kTopMargin);
    EXPECT_LT(err, m.tolerance) << m.name;
    EXPECT_LT(effect_err, m.tolerance) << m.name;
    // On these ids a hook that did nothing has an effect error of `moved`:
    // the setting must move the reference far enough for that to fail.
    if (!m.intervention.empty()) {
      EXPECT_GT(moved, m.tolerance) << m.name << ": too weak a setting to check";
    }
    if (m.teacher_forced) {
      const GoldScore ours = gold_score(got, m.prompt->gold), theirs = gold_score(want, m.prompt->gold);
      std::printf(
          "    teacher-forced gold (%zu tokens): engine %s (log-p %.3f, first miss %d), reference %s (log-p "
          "%.3f, first miss %d)\n",
          m.prompt->gold.size(), ours.correct ? "correct" : "wrong", ours.logprob, ours.first_miss,
          theirs.correct ? "correct" : "wrong", theirs.logprob, theirs.first_miss);
    }

    if (m.intervention.contains("mspoe")) {
      // Awareness = count / n (Ms-PoE eq. 1): counts near the reference's,
      // and the ratio each head got (eq. 2, by rank) per layer.
      const auto ref_score = decided.at("mspoe_score").get<std::vector<std::vector<double>>>();
      const auto ref_ratio = decided.at("mspoe_ratio").get<std::vector<std::vector<double>>>();
      const int first = m.intervention["mspoe"]["first_layer"].get<int>();
      ASSERT_EQ(ref_score.size(), static_cast<std::size_t>(c.layers) - static_cast<std::size_t>(first));
      const int slack = std::max(1, static_cast<int>(std::ceil(kCountSlack * n)));
      int heads = 0, close = 0, within_one = 0, worst = 0, same_layers = 0, ratio_diffs = 0;
      for (std::size_t l = 0; l < ref_score.size(); ++l) {
        const auto& ours_score = ei.mspoe_awareness().at(first + static_cast<int>(l));
        const auto& ours_ratio = ei.mspoe_scales().at(first + static_cast<int>(l));
        int differ = 0;
        for (std::size_t h = 0; h < ref_score[l].size(); ++h) {
          const int d = static_cast<int>(std::lround(std::fabs(ours_score[h] - ref_score[l][h]) * n));
          worst = std::max(worst, d);
          close += d <= slack ? 1 : 0;
          within_one += d <= 1 ? 1 : 0;
          ++heads;
          differ += std::fabs(ours_ratio[h] - ref_ratio[l][h]) < 1e-6 ? 0 : 1;
        }
        same_layers += differ == 0 ? 1 : 0;
        ratio_diffs += differ;
      }
      std::printf(
          "    Ms-PoE: awareness counts within %d keys for %d of %d heads (within 1: %d; worst %d keys of %d); "
          "ratios identical in %d of %zu layers (%d head ratios differ)\n",
          slack, close, heads, within_one, worst, n, same_layers, ref_score.size(), ratio_diffs);
      EXPECT_GE(close, kCountAgreement * heads) << m.name;
    }
    if (m.intervention.contains("position_map")) {
      const auto expected = decided.at("positions").get<std::vector<double>>();
      ASSERT_EQ(ei.prompt_positions().size(), expected.size()) << m.name;
      double worst = 0;
      for (std::size_t t = 0; t < expected.size(); ++t)
        worst = std::max(worst, std::fabs(ei.prompt_positions()[t] - expected[t]));
      std::printf("    CALIOPE: positions 0..%zu, last %.1f, worst difference %.1e\n", expected.size() - 1,
                  expected.back(), worst);
      EXPECT_LT(worst, 1e-6) << m.name;
    }
    if (m.intervention.contains("siw")) {
      const auto expected = decided.at("siw_dense").get<std::vector<std::vector<bool>>>();
      const auto layers = m.intervention["siw"]["layers"].get<std::vector<int>>();
      ASSERT_EQ(expected.size(), layers.size());
      int same = 0, dense = 0;
      for (std::size_t l = 0; l < layers.size(); ++l) {
        same += ei.siw_dense().at(layers[l]).dense == expected[l] ? 1 : 0;
        for (bool d : expected[l]) dense += d ? 1 : 0;
      }
      std::printf("    SIW: dense chunks identical in %d of %zu layers (%d dense chunk-layers in the reference)\n",
                  same, layers.size(), dense);
      EXPECT_GE(same, kDecisionAgreement * static_cast<double>(layers.size())) << m.name;
    }
  }
  std::printf("test: %.1f s, of which the reference %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - test_start).count(), ref.seconds);
}

INSTANTIATE_TEST_SUITE_P(Models, RealModel, ::testing::Values(kQwen05, kQwen15, kGemma3),
                         [](const ::testing::TestParamInfo<ModelSpec>& info) { return info.param.name; });

}  // namespace
}  // namespace midtune::engine
