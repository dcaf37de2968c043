// EngineBackend's per_sequence schedule (engine_backend.hpp): one item after
// another through Model::forward(Sequence&, ...), the logits on the host. A
// prompt prefix the whole batch shares (chat-template header and
// instruction) is prefilled once and every item runs only its own tail.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "backends/engine/engine_backend.hpp"
#include "backends/engine/engine_schedule.hpp"
#include "backends/engine/ops/scoring.hpp"

namespace midtune::engine {

// The shared prefix, prefilled once into `seq`; each item truncates back to
// it. Only for interventions whose keys do not depend on the rest of the
// prompt (plain and RoPE scales: Ms-PoE, CALIOPE, SIW and PHS all read the
// whole prompt first).
struct EngineBackend::SharedPrefix {
  Sequence seq;
  int length = 0;
};

namespace {

// Shared leading tokens, kept one short of the shortest prompt so every item
// still computes the logits of its own last prompt token.
int shared_prefix_length(std::span<const PreparedPrompt* const> prompts) {
  if (prompts.size() < 2) return 0;
  const auto& a = prompts.front()->tokens;
  std::size_t length = a.size();
  for (const PreparedPrompt* p : prompts) {
    std::size_t i = 0;
    while (i < length && i < p->tokens.size() && a[i] == p->tokens[i]) ++i;
    length = std::min({length, i, p->tokens.size() == 0 ? 0 : p->tokens.size() - 1});
  }
  return static_cast<int>(length);
}

}  // namespace

std::vector<std::int32_t> EngineBackend::generate_tokens(const std::vector<std::int32_t>& prompt,
                                                         const SequenceScales& scales, int max_new_tokens,
                                                         std::span<const double> positions,
                                                         const ForwardHooks* hooks) const {
  if (prompt.empty() || max_new_tokens <= 0) return {};
  Sequence seq(*model_, static_cast<int>(prompt.size()) + max_new_tokens, scales);
  return generate_on(seq, prompt, max_new_tokens, positions, hooks);
}

std::vector<std::int32_t> EngineBackend::generate_on(Sequence& seq, std::span<const std::int32_t> rest,
                                                     int max_new_tokens, std::span<const double> positions,
                                                     const ForwardHooks* hooks) const {
  std::vector<std::int32_t> out;
  if (rest.empty() || max_new_tokens <= 0) return out;
  const int last = static_cast<int>(rest.size()) - 1;
  std::vector<float> logits = model_->forward(seq, rest, positions, std::span<const int>(&last, 1), hooks);
  const int zero = 0;
  for (int i = 0; i < max_new_tokens; ++i) {
    const std::int32_t next = argmax_row(logits.data(), model_->vocab());
    if (tokenizer_.is_end_of_generation(next)) break;
    out.push_back(next);
    if (i + 1 == max_new_tokens) break;
    logits = model_->forward(seq, std::span<const std::int32_t>(&next, 1), {}, std::span<const int>(&zero, 1), hooks);
  }
  return out;
}

void EngineBackend::run_per_sequence(std::vector<Item>& items, const Intervention& intervention,
                                     const SequenceScales& plain, const RunOptions& options) {
  std::unique_ptr<SharedPrefix> shared;
  std::vector<const PreparedPrompt*> prompts;
  std::size_t longest = 0;
  for (const Item& it : items) {
    prompts.push_back(&it.prompt);
    longest = std::max(longest, it.tokens);
  }
  const int prefix = options_.reuse_prefix && !reads_whole_prompt(intervention) ? shared_prefix_length(prompts) : 0;
  if (prefix > 0) {
    shared.reset(new SharedPrefix{Sequence(*model_, static_cast<int>(longest), plain), prefix});
    model_->forward(shared->seq, std::span<const std::int32_t>(items.front().prompt.tokens).first(prefix), {}, {});
    last_stats_.prefix_tokens = static_cast<std::size_t>(prefix);
    last_stats_.forward_tokens += static_cast<std::size_t>(prefix);
  }
  for (Item& it : items) {
    try {
      run_one(it, options, shared.get());
    } catch (const BackendError&) {
      throw;
    } catch (const std::domain_error& e) {  // NaN / infinity in the forward pass: the input overflows
      throw InvalidInputError("engine: item '" + it.item->id + "': " + e.what());
    } catch (const std::exception& e) {
      throw BackendError("engine: item '" + it.item->id + "': " + e.what());
    }
  }
}

void EngineBackend::run_one(Item& it, const RunOptions& options, SharedPrefix* shared) {
  const auto started = std::chrono::steady_clock::now();
  const std::vector<std::int32_t>& prompt = it.prompt.tokens;
  const SequenceScales& scales = *it.scales;
  if (options.mode == Mode::generate) {
    if (shared != nullptr) {
      shared->seq.truncate(shared->length);
      const auto rest = std::span<const std::int32_t>(prompt).subspan(shared->length);
      it.generated = generate_on(shared->seq, rest, options.max_new_tokens, {}, nullptr);
      last_stats_.forward_tokens += rest.size() + (it.generated.empty() ? 0 : it.generated.size() - 1);
    } else {
      it.generated = generate_tokens(prompt, scales, options.max_new_tokens, it.positions(), it.hooks());
      last_stats_.forward_tokens += prompt.size() + (it.generated.empty() ? 0 : it.generated.size() - 1);
    }
  } else {
    const std::vector<std::int32_t>& gold = it.gold;
    std::vector<std::int32_t> input = prompt;
    input.insert(input.end(), gold.begin(), gold.end() - 1);  // the last gold token is never an input
    std::vector<int> rows(gold.size());
    for (std::size_t i = 0; i < gold.size(); ++i) rows[i] = static_cast<int>(prompt.size() - 1 + i);
    std::vector<float> logits;
    if (shared != nullptr) {
      shared->seq.truncate(shared->length);
      for (int& r : rows) r -= shared->length;
      const auto rest = std::span<const std::int32_t>(input).subspan(shared->length);
      logits = model_->forward(shared->seq, rest, {}, rows);
      last_stats_.forward_tokens += rest.size();
    } else if (!it.hooked) {
      Sequence seq(*model_, static_cast<int>(input.size()), scales);
      logits = model_->forward(seq, input, {}, rows);
      last_stats_.forward_tokens += input.size();
    } else {
      Sequence seq(*model_, static_cast<int>(input.size()), scales);
      // Prompt alone (the hooks read its last query), then the gold tokens.
      const int last = static_cast<int>(prompt.size()) - 1;
      logits = model_->forward(seq, prompt, it.positions(), std::span<const int>(&last, 1), it.hooks());
      // Then all gold tokens in one call, exactly as one decode step per
      // token: Ms-PoE scales, CALIOPE positions and SIW factors are fixed by
      // the prefill, and PHS rescales every row's query, each row being its
      // own step's last token (test HookedTeacherForcedEqualsStepByStepDecoding).
      const std::span<const std::int32_t> gold_inputs(gold.data(), gold.size() - 1);
      if (!gold_inputs.empty()) {
        std::vector<int> gold_rows(gold_inputs.size());
        for (std::size_t i = 0; i < gold_rows.size(); ++i) gold_rows[i] = static_cast<int>(i);
        const auto steps = model_->forward(seq, gold_inputs, {}, gold_rows, it.hooks());
        logits.insert(logits.end(), steps.begin(), steps.end());
      }
      last_stats_.forward_tokens += input.size();
    }
    const int vocab = model_->vocab();
    it.out.gold_emitted_first = true;
    it.out.gold_logprob = 0.0;
    for (std::size_t i = 0; i < gold.size(); ++i) {
      const float* row = logits.data() + i * vocab;
      it.out.gold_emitted_first = it.out.gold_emitted_first && argmax_row(row, vocab) == gold[i];
      it.out.gold_logprob += log_softmax_at(row, vocab, gold[i]);
    }
  }
  it.out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
}

}  // namespace midtune::engine
