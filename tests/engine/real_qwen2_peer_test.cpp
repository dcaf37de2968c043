// A real Qwen2.5 against its peers (ctest label `peer`):
// Qwen2.5-Coder-0.5B-Instruct Q4_K_M (`qwen2`: RoPE base 1e6, NEOX pairs,
// 14 query heads over 2 KV heads, Q/K/V biases, 24 layers), fetched by
// `scripts/fetch_real_model.sh qwen2.5-coder-0.5b` (MIDTUNE_QWEN05_MODEL
// names another copy).
//   - Plain greedy text against llama.cpp's llama-simple on four prompts,
//     partings judged by the fp32 numpy reference as for every peer file.
//   - Every method's mechanism on real weights against the independent numpy
//     reference (tests/reference/interventions_reference.py --eval, run now
//     on this file, one process for every case): last-row logits and what
//     the method decided, on KV-retrieval prompts in the model's ChatML
//     template built exactly as `ga-run eval` builds them (generated UUID
//     pairs, answer primed, chunk spans), LPES / PI per-layer scales, Ms-PoE
//     per-head scales under 7:1 GQA, SIW, CALIOPE, PHS.
// The Ms-PoE case at its paper's setting runs on a 20-pair prompt, the
// length where `ga-run eval` saw that setting take the model from ~100 % to
// 0 % correct, teacher-forced over the gold answer as `ga-run eval` scores
// it: every gold row's logits against the reference's, and both scores
// printed. Measured: plain correct in both; under Ms-PoE both miss the gold
// at its second token (log-p -141.5 engine, -137.5 reference), the argmax
// identical in every row that is not a near-tie, so that collapse is the
// model's response to the method, not the engine's.
//
// Without the model file the test is skipped (the file is an opt-in fetch,
// also under CI); with it, missing peers skip it, or fail it under CI=true.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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

namespace midtune::engine {
namespace {

using namespace ::midtune::engine::peer;  // NOLINT: the peer tests' shared helpers
using json = nlohmann::json;

fs::path qwen05_model() {
  if (const char* env = std::getenv("MIDTUNE_QWEN05_MODEL"); env && *env) return env;
  // The cache scripts/fetch_real_model.sh writes to.
  fs::path cache;
  if (const char* c = std::getenv("MIDTUNE_CACHE"); c && *c) {
    cache = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    cache = fs::path(x) / "midtune";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    cache = fs::path(home) / ".cache/midtune";
  }
  return cache / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
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

// The figures below were measured on the AVX2 path (the one with the larger
// int8 errors on SmolLM2; AVX-512 sat at ~0.7x of them there).
//
// Worst |engine - fp32 reference| over all 151936 logits of every plain row
// (greedy prompts, both KV prompts, the 31 gold rows): 0.372 measured,
// about 2.7x that allowed. The engine's int8 activations (llama.cpp's too)
// dominate it; Qwen's logits sit much closer to the reference than SmolLM2's
// (1.4) or Gemma 3's (1.0).
constexpr double kPlainLogitTolerance = 1.0;
// The method checks, as tests/engine/intervention_model_test.cpp: on the
// reference's top-20 ids of each row, |engine - reference| and the error of
// the method's effect (with - plain on the same ids); top-1 must agree where
// the reference's top-2 margin exceeds kTopMargin. kLogitTolerance is
// tighter than the 1.5 of the small-model tests: measured worst 0.146 here
// (PI, LPES, Ms-PoE with equal ratios, SIW, CALIOPE, PHS on 515 tokens), and
// at 1.5 a hook that did nothing would pass PI 1.2, whose reference moves
// by only ~1.0 (each case must move the reference by more than its
// tolerance, checked below). kMsPoeLogitTolerance, the small-model tests'
// 2.0, where Ms-PoE ranks heads by a threshold count: measured 0.84 over the
// 31 gold rows of the 20-pair prompt, whose int8 counts swap the ratios of
// near-tied heads in 15 of 22 layers while the reference's logits move by 17.
constexpr double kLogitTolerance = 0.5;
constexpr double kMsPoeLogitTolerance = 2.0;
constexpr double kTopMargin = 0.5;
// Ms-PoE's awareness counts keys whose weight exceeds alpha / n (eq. 1): at
// n = 1461 that threshold is 0.2 % of the attention, and the int8
// activations move weights across it (measured: 237 of 308 heads within one
// key, worst 6 keys = 0.41 % of n; at n = 515, worst 3 = 0.58 %). On the
// engine's fp32 path (Model's fp32_weights) every count and every ratio
// equalled the reference's and the last-row logits agreed within 5e-5, so
// these are the int8 activations' differences, not the method's: counts
// within kCountSlack x n keys (at least one) for kCountAgreement of heads.
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
  const BatchItem item =
      datasets::make_batch_item(datasets::kv_prompt(moved.records, moved.key), wrapper, "peer",
                                datasets::kv_answer_start(base.key, base.value, true),
                                static_cast<double>(gold) / static_cast<double>(pairs - 1));
  const PreparedPrompt prepared = prepare_prompt(tokenizer, item);
  return {std::to_string(pairs) + " pairs, gold at " + std::to_string(gold), prepared.tokens, hook_spans(prepared),
          tokenizer.encode(item.gold, false, false)};
}

// teacher_forced: the prompt and the gold answer's inputs, scored row by row
// as `ga-run eval` scores them (EngineBackend's teacher_forced mode);
// otherwise the prompt's last row only.
struct MethodCase {
  std::string name;
  const KvPrompt* prompt;
  json intervention;
  double tolerance;
  bool teacher_forced = false;
};

json mspoe(double lo, double hi) {
  return {{"min_ratio", lo}, {"max_ratio", hi}, {"first_layer", 2}, {"alpha", 3.0},
          {"order", "awareness"}, {"reference_spacing", false}};
}

json int_list(int first, int last) {
  json out = json::array();
  for (int l = first; l <= last; ++l) out.push_back(l);
  return out;
}

// interventions_reference.py --eval on every case: last-row logits (one
// vocab-long row per case) and its decisions.
struct Reference {
  std::vector<std::vector<std::vector<double>>> logits;  // per case, per scored row
  json decisions;
  double seconds = 0;
};

Reference run_reference(const fs::path& model, const json& cases, std::size_t vocab) {
  ScratchDir dir;
  const fs::path in = dir.path() / "cases.json", logits = dir.path() / "logits.f64",
                 decisions = dir.path() / "decisions.json";
  std::ofstream(in) << cases.dump();
  const auto start = std::chrono::steady_clock::now();
  const Finished run = run_process(
      {python().string(), std::string(MIDTUNE_SOURCE_DIR) + "/tests/reference/interventions_reference.py", "--eval",
       in.string(), "--model", model.string(), "--logits", logits.string(), "--decisions", decisions.string()},
      dir.path().string());
  if (run.exit_code != 0) throw std::runtime_error("interventions_reference.py --eval failed: " + describe(run));
  Reference out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.decisions = json::parse(std::ifstream(decisions));
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
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
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

// One test, as loading the reference (dequantising every weight) is a large
// part of its time: greedy text against llama-simple, then one reference
// run for the plain prompts, the partings and every method case.
TEST(RealQwen2, GreedyMatchesLlamaSimpleAndEveryMethodTheNumpyReference) {
  const fs::path file = qwen05_model();
  if (!fs::exists(file)) {
    GTEST_SKIP() << "Qwen2.5-Coder-0.5B-Instruct not found at " << file
                 << " (scripts/fetch_real_model.sh qwen2.5-coder-0.5b fetches it; MIDTUNE_QWEN05_MODEL names "
                    "another copy)";
  }
  REQUIRE_PEERS(python(), llama_simple());
  const auto test_start = std::chrono::steady_clock::now();

  const auto partings =
      compare_greedy(file, "qwen2.5-coder-0.5b", kGreedyPrompts, kGreedyTokens, std::vector<int>{0, 1, 2, 3});

  Model model(file);
  const ModelConfig& c = model.config();
  ASSERT_EQ(c.heads, 14u);
  ASSERT_EQ(c.kv_heads, 2u);
  ASSERT_EQ(c.layers, 24u);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());

  // The Ms-PoE verdict's prompt: 20 pairs, the gold pair in the middle; the
  // other methods' prompt: 6 pairs (a few hundred tokens), so the reference's
  // forward passes stay within the test's time.
  const KvPrompt long_kv = make_kv_prompt(model, tokenizer, 20, 10, 2026);
  const KvPrompt short_kv = make_kv_prompt(model, tokenizer, 6, 3, 7);
  std::printf("KV prompts: %s: %zu tokens, %zu chunks; %s: %zu tokens, %zu chunks\n", long_kv.name.c_str(),
              long_kv.tokens.size(), long_kv.chunks.size(), short_kv.name.c_str(), short_kv.tokens.size(),
              short_kv.chunks.size());

  // LPES: a degree-3 Bezier curve in the paper's 1.0-2.0 range, sampled per
  // layer (LPES eq. 3, 5, 6).
  const std::vector<bezier::ControlPoint> points = {{0, 1.0}, {8, 1.9}, {15, 1.1}, {23, 1.6}};
  json lpes = json::array();
  for (double s : bezier::sample_layer_scales(bezier::CurveKind::bezier, points, static_cast<int>(c.layers)))
    lpes.push_back(json::array({s}));

  // SIW: alpha 0.5 in dense chunks and 3.0 elsewhere in layers 2-21, strong
  // enough to move the reference beyond the tolerance (1.5 / 0.5 in layers
  // 4-19 moved it by 0.25 only). PHS: the paper's layers 10-25 of 32 scaled
  // to 24 (7-18), channel 646 (the largest of those layers' normed inputs)
  // times -1, the paper's grid value for Llama-2-7B (its factor 0 moved the
  // reference by 0.75 here).
  const std::vector<MethodCase> methods = {
      {"plain (20 pairs, teacher-forced)", &long_kv, json::object(), kLogitTolerance, true},
      {"Ms-PoE 1.2-1.8 from layer 2 (paper; 20 pairs, teacher-forced)", &long_kv, {{"mspoe", mspoe(1.2, 1.8)}},
       kMsPoeLogitTolerance, true},
      {"plain (6 pairs)", &short_kv, json::object(), kLogitTolerance},
      {"PI 1.2 on every layer", &short_kv, {{"rope_scale", json::array({json::array({1.2})})}}, kLogitTolerance},
      {"LPES Bezier curve 1.0-1.9", &short_kv, {{"rope_scale", lpes}}, kLogitTolerance},
      // Equal ratios: no ranking to swap, so the tighter bound.
      {"Ms-PoE every ratio 1.2", &short_kv, {{"mspoe", mspoe(1.2, 1.2)}}, kLogitTolerance},
      {"SIW dense 0.5 sparse 3.0, layers 2-21", &short_kv,
       {{"siw", {{"alpha_dense", 0.5}, {"alpha_sparse", 3.0}, {"sigma", 1.0}, {"layers", int_list(2, 21)}}}},
       kLogitTolerance},
      {"CALIOPE Moses gap 10000", &short_kv, {{"position_map", {{"kind", "moses"}, {"gap", 10000.0}}}},
       kLogitTolerance},
      {"CALIOPE Hourglass 5-1000", &short_kv,
       {{"position_map", {{"kind", "hourglass"}, {"delta_min", 5.0}, {"delta_max", 1000.0}}}}, kLogitTolerance},
      {"PHS channel 646 x -1, layers 7-18", &short_kv,
       {{"hidden_channel", {{"channel", 646}, {"scale", -1.0}, {"layers", int_list(7, 18)}}}}, kLogitTolerance},
  };

  // Every case for the one reference run: the greedy prompts, the partings'
  // agreed prefixes, then the method cases.
  json cases = json::array();
  std::vector<std::vector<std::int32_t>> greedy_prompts;
  for (const auto& p : kGreedyPrompts) greedy_prompts.push_back(tokenizer.encode(p, tokenizer.add_bos_default(), true));
  for (const auto& t : greedy_prompts) cases.push_back({{"name", "greedy prompt"}, {"tokens", t}});
  for (const auto& t : agreed_prefixes(partings)) cases.push_back({{"name", "parting"}, {"tokens", t}});
  const std::size_t first_method = cases.size();
  for (const MethodCase& m : methods) {
    json chunks = json::array();
    for (const auto& s : m.prompt->chunks) chunks.push_back({s.begin, s.end});
    std::vector<std::int32_t> tokens = m.prompt->tokens;
    json one = {{"name", m.name}, {"chunks", chunks}, {"intervention", m.intervention}};
    if (m.teacher_forced) {
      one["prompt_tokens"] = tokens.size();
      tokens.insert(tokens.end(), m.prompt->gold.begin(), m.prompt->gold.end() - 1);
    }
    one["tokens"] = tokens;
    cases.push_back(std::move(one));
  }
  const Reference ref = run_reference(file, json{{"cases", cases}}, c.vocab);
  std::printf("reference: %zu cases in %.1f s (loading %.1f s)\n", cases.size(), ref.seconds,
              ref.decisions.at("load_seconds").get<double>());

  // Greedy partings, and the plain greedy prompts' logits.
  const std::size_t greedy = greedy_prompts.size();
  std::vector<std::vector<double>> last_rows;
  for (const auto& rows : ref.logits) last_rows.push_back(rows.front());
  expect_near_ties(partings, {last_rows.begin() + static_cast<std::ptrdiff_t>(greedy),
                              last_rows.begin() + static_cast<std::ptrdiff_t>(first_method)},
                   kNearTie);
  const LogitComparison plain = compare_logits(
      model, greedy_prompts, {last_rows.begin(), last_rows.begin() + static_cast<std::ptrdiff_t>(greedy)});
  std::printf("plain greedy prompts: worst |engine - fp32 reference| %.3f over all logits (tolerance %.2f), "
              "top-1 kept %d/%zu\n",
              plain.worst, kPlainLogitTolerance, plain.top1_kept, greedy);
  EXPECT_LT(plain.worst, kPlainLogitTolerance);

  // Every method case, row by row, against the plain rows of its prompt for
  // the effect.
  std::map<const KvPrompt*, std::pair<std::vector<std::vector<float>>, std::vector<std::vector<double>>>> plain_of;
  for (std::size_t i = 0; i < methods.size(); ++i) {
    const MethodCase& m = methods[i];
    const auto& want = ref.logits[first_method + i];
    const json& decided = ref.decisions.at("cases").at(first_method + i);
    const int n = static_cast<int>(m.prompt->tokens.size());
    const hooks::EngineIntervention ei(model, Intervention::from_json(m.intervention), n, m.prompt->chunks);
    const auto got = engine_rows(model, *m.prompt, ei, m.teacher_forced);
    ASSERT_EQ(got.size(), want.size()) << m.name;
    if (m.intervention.empty()) {
      plain_of[m.prompt] = {got, want};
      double all = 0;
      for (std::size_t r = 0; r < got.size(); ++r)
        for (std::size_t t = 0; t < got[r].size(); ++t) all = std::max(all, std::fabs(got[r][t] - want[r][t]));
      std::printf("%-48s worst |engine - reference| over all logits of %zu rows %.3f (tolerance %.2f)\n",
                  m.name.c_str(), got.size(), all, kPlainLogitTolerance);
      EXPECT_LT(all, kPlainLogitTolerance) << m.name;
    }
    const auto& [engine_plain, ref_plain] = plain_of.at(m.prompt);
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
    std::printf("%-48s |logit - ref| %.3f  |effect - ref effect| %.3f (tolerance %.2f)  reference moved %.2f  "
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
      std::printf("    teacher-forced gold (%zu tokens): engine %s (log-p %.3f, first miss %d), reference %s (log-p "
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
      std::printf("    Ms-PoE: awareness counts within %d keys for %d of %d heads (within 1: %d; worst %d keys of %d); "
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
      std::printf("    SIW: dense chunks identical in %d of %zu layers (%d dense chunk-layers in the reference)\n", same,
                  layers.size(), dense);
      EXPECT_GE(same, kDecisionAgreement * static_cast<double>(layers.size())) << m.name;
    }
  }
  std::printf("test: %.1f s, of which the reference %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - test_start).count(), ref.seconds);
}

}  // namespace
}  // namespace midtune::engine
