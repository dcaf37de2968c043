#include "backends/engine/tools/phs_capture.hpp"

#include <random>
#include <stdexcept>
#include <string>

#include <tbb/task_arena.h>

#include "datasets/hashing.hpp"
#include "datasets/kv_retrieval.hpp"
#include "datasets/prompts.hpp"
#include "datasets/slice.hpp"

namespace midtune::engine::tools {

std::vector<std::vector<std::int32_t>> random_token_strings(const Tokenizer& tokenizer, int count, int tokens,
                                                            std::uint64_t seed) {
  std::vector<std::vector<std::int32_t>> out;
  for (int i = 0; i < count; ++i) {
    std::mt19937_64 rng(datasets::derive_seed(seed, "phs-random-string", static_cast<std::uint64_t>(i)));
    std::uniform_int_distribution<int> printable('!', '~');
    std::string text;
    std::vector<std::int32_t> ids;
    // Random ASCII packs roughly 1-3 characters per token; grow until long enough.
    while (static_cast<int>(ids.size()) < tokens) {
      for (int c = 0; c < 2 * tokens; ++c) text.push_back(static_cast<char>(printable(rng)));
      ids = tokenizer.encode(text, /*add_bos=*/false, /*parse_special=*/false);
    }
    ids.resize(tokens);
    out.push_back(std::move(ids));
  }
  return out;
}

phs::LayerCurves average_residual_stream(Model& model,
                                         const std::vector<std::vector<std::int32_t>>& strings, int threads,
                                         const std::function<void(int done)>& progress) {
  if (strings.empty()) throw std::invalid_argument("phs-search: no random strings to average");
  const int layers = static_cast<int>(model.config().layers);
  const int hidden = static_cast<int>(model.config().hidden);
  const int tokens = static_cast<int>(strings.front().size());
  std::vector<double> sum(static_cast<std::size_t>(layers) * tokens * hidden, 0.0);
  ForwardHooks hooks;
  hooks.on_layer_output = [&](int layer, int start, std::span<const float> residual, int count) {
    double* row = sum.data() + (static_cast<std::size_t>(layer) * tokens + start) * hidden;
    for (std::size_t i = 0; i < static_cast<std::size_t>(count) * hidden; ++i) row[i] += residual[i];
  };
  tbb::task_arena arena(threads > 0 ? threads : static_cast<int>(tbb::task_arena::automatic));
  arena.execute([&] {
    for (std::size_t s = 0; s < strings.size(); ++s) {
      if (static_cast<int>(strings[s].size()) != tokens) {
        throw std::invalid_argument("phs-search: random strings must all have " + std::to_string(tokens) + " tokens");
      }
      Sequence seq(model, tokens, SequenceScales::ones(layers, static_cast<int>(model.config().heads)));
      model.forward(seq, strings[s], {}, {}, &hooks);
      if (progress) progress(static_cast<int>(s) + 1);
    }
  });
  phs::LayerCurves curves(layers, tokens, hidden);
  const double n = static_cast<double>(strings.size());
  for (std::size_t i = 0; i < sum.size(); ++i) curves.values[i] = static_cast<float>(sum[i] / n);
  return curves;
}

std::vector<BatchItem> kv_validation_items(const datasets::PromptWrapper& wrapper, const KvValidationSpec& spec) {
  if (spec.prompts < 1) throw std::invalid_argument("phs-search: --val-prompts must be at least 1");
  if (spec.pairs < 2) throw std::invalid_argument("phs-search: --val-pairs must be at least 2");
  if (spec.gold_positions.empty()) throw std::invalid_argument("phs-search: --val-positions is empty");
  for (double p : spec.gold_positions) {
    if (!(p >= 0.0 && p <= 1.0)) {
      throw std::invalid_argument("phs-search: --val-positions: " + std::to_string(p) + " is outside [0, 1]");
    }
  }
  const auto pairs = static_cast<std::size_t>(spec.pairs);
  std::vector<BatchItem> items;
  for (int j = 0; j < spec.prompts; ++j) {
    const double position = spec.gold_positions[static_cast<std::size_t>(j) % spec.gold_positions.size()];
    const datasets::KvItem base = datasets::generate_kv_item(
        datasets::derive_seed(spec.seed, "phs-validation", static_cast<std::uint64_t>(j)), pairs,
        "phs-val:" + std::to_string(j));
    const std::size_t gold = datasets::gold_chunk_index(position, pairs);
    const datasets::KvItem placed = datasets::with_gold_at(base, gold);
    const auto prompt = datasets::kv_prompt(placed.records, placed.key);
    const auto answer = datasets::kv_answer_start(placed.key, placed.value, /*prime=*/true);
    items.push_back(datasets::make_batch_item(prompt, wrapper, base.id, answer,
                                              static_cast<double>(gold) / static_cast<double>(pairs - 1)));
  }
  return items;
}

double validation_loss(Backend& backend, const Intervention& intervention, const std::vector<BatchItem>& items) {
  RunOptions options;
  options.mode = Mode::teacher_forced;
  const auto outputs = backend.run(intervention, items, options);
  double loss = 0.0;
  for (const SampleOutput& o : outputs) loss -= o.gold_logprob;
  return loss / static_cast<double>(outputs.size());
}

}  // namespace midtune::engine::tools
