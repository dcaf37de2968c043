#include "backends/engine/engine_backend.hpp"

#include "backends/engine/gguf/chat_template.hpp"
#include "backends/engine/engine_hooks.hpp"
#include "backends/engine/ops/scoring.hpp"
#include "methods/registry.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

namespace midtune::engine {

namespace {
// How a bf16 KV cache is named in identities, as on the GPU engine.
const std::string kBf16KvCache = ", bf16 KV cache";
}  // namespace

EngineBackend::EngineBackend(const std::filesystem::path& model_path, EngineOptions options)
    : options_(options),
      model_(std::make_unique<Model>(model_path, options.isa, options.fp32, options.kv_cache)),
      tokenizer_(Tokenizer::from_gguf(model_->file())),
      arena_(options.threads > 0 ? std::make_unique<tbb::task_arena>(options.threads)
                                 : std::make_unique<tbb::task_arena>()) {
  if (tokenizer_.vocab_size() > static_cast<std::size_t>(model_->vocab())) {
    throw std::invalid_argument(model_path.string() + ": tokenizer has " + std::to_string(tokenizer_.vocab_size()) +
                                " tokens but the output matrix only " + std::to_string(model_->vocab()));
  }
  identity_ = engine_identity(*model_, tokenizer_);
  // Absent for the default (native products, fp32 cache), so that its
  // results keep their keys; every other choice computes other numbers.
  if (options_.fp32) identity_.precision = "fp32";
  if (options_.kv_cache == KvForm::bf16) identity_.precision = (options_.fp32 ? "fp32" : "native") + kBf16KvCache;
}

ModelIdentity engine_identity(const Model& model, const Tokenizer& tokenizer) {
  const GgufFile& file = model.file();
  const ModelConfig& c = model.config();
  ModelIdentity id;
  id.name = file.get_string_or("general.name", file.path().filename().string());
  id.architecture = c.arch;
  id.layers = static_cast<int>(c.layers);
  id.heads = static_cast<int>(c.heads);
  id.kv_heads = static_cast<int>(c.kv_heads);
  id.hidden = static_cast<int>(c.hidden);
  id.tokenizer_hash = tokenizer.hash();
  id.content_hash = model.content_hash();
  return id;
}

ModelIdentity EngineBackend::identity() const { return identity_; }

nlohmann::json EngineBackend::execution() const {
  return {{"device", "cpu"},
          {"kernel_path", to_string(options_.isa)},
          {"threads", arena_->max_concurrency()},
          {"precision", std::string(options_.fp32 ? "fp32" : "int8 activations (float types at their own precision)") +
                            (options_.kv_cache == KvForm::bf16 ? kBf16KvCache : "")}};
}

void EngineBackend::validate(const Intervention& intervention) const {
  validate_intervention(intervention, hooks::shape_of(*model_));
}

RopeScales intervention_rope_scales(const ModelConfig& c, const Intervention& intervention) {
  validate_intervention(intervention, hooks::shape_of(c));
  RopeScales s = RopeScales::ones(static_cast<int>(c.layers), static_cast<int>(c.heads));
  s.scale = rope_scales_per_head(intervention.rope_scale, s.layers, s.heads);
  return s;
}

RopeScales EngineBackend::rope_scales(const Intervention& intervention) const {
  return intervention_rope_scales(model_->config(), intervention);
}

PreparedPrompt prepare_prompt(const Tokenizer& tokenizer, const BatchItem& item) {
  PreparedPrompt out;
  const auto with_offsets = tokenizer.encode_with_offsets(item.prompt_text, tokenizer.add_bos_default(), true);
  out.tokens.reserve(with_offsets.size());
  for (const auto& t : with_offsets) out.tokens.push_back(t.id);
  for (const ByteSpan& chunk : item.chunks) {
    if (chunk.begin > chunk.end || chunk.end > item.prompt_text.size()) {
      throw BackendError("item '" + item.id + "': chunk [" + std::to_string(chunk.begin) + ", " +
                         std::to_string(chunk.end) + ") outside the prompt of " +
                         std::to_string(item.prompt_text.size()) + " bytes");
    }
    out.chunk_tokens.push_back(token_span_for_bytes(with_offsets, chunk.begin, chunk.end));
  }
  return out;
}

PreparedPrompt EngineBackend::prepare(const BatchItem& item) const { return prepare_prompt(tokenizer_, item); }

std::vector<std::int32_t> EngineBackend::generate_tokens(const std::vector<std::int32_t>& prompt,
                                                         const RopeScales& scales, int max_new_tokens,
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

// The prompt prefix every item of a batch shares (chat-template header and
// instruction), prefilled once into `seq`; each item truncates back to it and
// runs only its own tail. Only for interventions whose keys do not depend on
// the rest of the prompt (plain and RoPE scales: Ms-PoE, CALIOPE, SIW and PHS
// all read the whole prompt first).
struct EngineBackend::SharedPrefix {
  Sequence seq;
  int length = 0;
};

namespace {

// Shared leading tokens, kept one short of the shortest prompt so every item
// still computes the logits of its own last prompt token.
int shared_prefix_length(const std::vector<PreparedPrompt>& prompts) {
  if (prompts.size() < 2) return 0;
  std::size_t length = prompts.front().tokens.size();
  for (const PreparedPrompt& p : prompts) {
    const auto& a = prompts.front().tokens;
    std::size_t i = 0;
    while (i < length && i < p.tokens.size() && a[i] == p.tokens[i]) ++i;
    length = std::min({length, i, p.tokens.size() == 0 ? 0 : p.tokens.size() - 1});
  }
  return static_cast<int>(length);
}

}  // namespace

SampleOutput EngineBackend::run_one(const BatchItem& item, const PreparedPrompt& prompt,
                                    std::span<const std::int32_t> gold, const Intervention& intervention,
                                    const RopeScales& plain_scales, const RunOptions& options, SharedPrefix* shared) {
  const auto started = std::chrono::steady_clock::now();
  SampleOutput out;
  out.id = item.id;
  if (prompt.tokens.empty()) throw InvalidInputError("item '" + item.id + "': empty prompt");
  out.prompt_tokens = static_cast<int>(prompt.tokens.size());
  // Interventions that read the whole prompt (its chunks, its last query).
  std::unique_ptr<hooks::EngineIntervention> hooked;
  if (reads_whole_prompt(intervention)) {
    hooked = std::make_unique<hooks::EngineIntervention>(*model_, intervention, out.prompt_tokens, hook_spans(prompt));
  }
  const RopeScales& scales = hooked ? hooked->sequence_scales() : plain_scales;
  const std::span<const double> positions = hooked ? std::span<const double>(hooked->prompt_positions()) : std::span<const double>();
  const ForwardHooks* forward_hooks = hooked ? hooked->hooks() : nullptr;
  const std::size_t context = model_->config().context_length;
  if (options.mode == Mode::generate) {
    if (context > 0 && prompt.tokens.size() + options.max_new_tokens > context) {
      throw InvalidInputError("item '" + item.id + "': " + std::to_string(prompt.tokens.size()) + " prompt tokens + " +
                         std::to_string(options.max_new_tokens) + " new exceed the model context " + std::to_string(context));
    }
    std::vector<std::int32_t> generated;
    if (shared != nullptr) {
      shared->seq.truncate(shared->length);
      const auto rest = std::span<const std::int32_t>(prompt.tokens).subspan(shared->length);
      generated = generate_on(shared->seq, rest, options.max_new_tokens, {}, nullptr);
      last_stats_.forward_tokens += rest.size() + (generated.empty() ? 0 : generated.size() - 1);
    } else {
      generated = generate_tokens(prompt.tokens, scales, options.max_new_tokens, positions, forward_hooks);
      last_stats_.forward_tokens += prompt.tokens.size() + (generated.empty() ? 0 : generated.size() - 1);
    }
    out.output_text = tokenizer_.decode_continuation(prompt.tokens.back(), generated, false);
  } else {
    if (gold.empty()) throw BackendError("item '" + item.id + "': teacher_forced needs a non-empty gold answer");
    std::vector<std::int32_t> input = prompt.tokens;
    input.insert(input.end(), gold.begin(), gold.end() - 1);  // the last gold token is never an input
    if (context > 0 && input.size() > context) {
      throw InvalidInputError("item '" + item.id + "': " + std::to_string(input.size()) + " tokens exceed the model context " +
                         std::to_string(context));
    }
    std::vector<int> rows(gold.size());
    for (std::size_t i = 0; i < gold.size(); ++i) rows[i] = static_cast<int>(prompt.tokens.size() - 1 + i);
    std::vector<float> logits;
    if (shared != nullptr) {
      shared->seq.truncate(shared->length);
      for (int& r : rows) r -= shared->length;
      const auto rest = std::span<const std::int32_t>(input).subspan(shared->length);
      logits = model_->forward(shared->seq, rest, {}, rows);
      last_stats_.forward_tokens += rest.size();
    } else if (!hooked) {
      Sequence seq(*model_, static_cast<int>(input.size()), scales);
      logits = model_->forward(seq, input, {}, rows);
      last_stats_.forward_tokens += input.size();
    } else {
      Sequence seq(*model_, static_cast<int>(input.size()), scales);
      // Prompt alone (the hooks read its last query), then the gold tokens.
      const int last = static_cast<int>(prompt.tokens.size()) - 1;
      logits = model_->forward(seq, prompt.tokens, positions, std::span<const int>(&last, 1), forward_hooks);
      // Then all gold tokens in one call, exactly as one decode step per
      // token: Ms-PoE scales, CALIOPE positions and SIW factors are fixed by
      // the prefill, and PHS rescales every row's query, each row being its
      // own step's last token (test HookedTeacherForcedEqualsStepByStepDecoding).
      const std::span<const std::int32_t> gold_inputs(gold.data(), gold.size() - 1);
      if (!gold_inputs.empty()) {
        std::vector<int> gold_rows(gold_inputs.size());
        for (std::size_t i = 0; i < gold_rows.size(); ++i) gold_rows[i] = static_cast<int>(i);
        const auto steps = model_->forward(seq, gold_inputs, {}, gold_rows, forward_hooks);
        logits.insert(logits.end(), steps.begin(), steps.end());
      }
      last_stats_.forward_tokens += input.size();
    }
    const int vocab = model_->vocab();
    out.gold_emitted_first = true;
    out.gold_logprob = 0.0;
    for (std::size_t i = 0; i < gold.size(); ++i) {
      const float* row = logits.data() + i * vocab;
      out.gold_emitted_first = out.gold_emitted_first && argmax_row(row, vocab) == gold[i];
      out.gold_logprob += log_softmax_at(row, vocab, gold[i]);
    }
  }
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return out;
}

std::vector<SampleOutput> EngineBackend::run(const Intervention& intervention, const std::vector<BatchItem>& batch,
                                             const RunOptions& options) {
  RopeScales scales;
  try {
    scales = rope_scales(intervention);
  } catch (const std::invalid_argument& e) {
    throw InvalidInputError(std::string("engine: invalid intervention: ") + e.what());
  }
  last_stats_ = {};
  std::vector<PreparedPrompt> prompts;
  prompts.reserve(batch.size());
  std::vector<std::vector<std::int32_t>> golds(batch.size());
  std::size_t longest = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const BatchItem& item = batch[i];
    try {
      prompts.push_back(prepare(item));
    } catch (const BackendError&) {
      throw;
    } catch (const std::exception& e) {
      throw BackendError("engine: item '" + item.id + "': " + e.what());
    }
    if (options.mode == Mode::teacher_forced) golds[i] = tokenizer_.encode(item.gold, false, false);
    const std::size_t tail = options.mode == Mode::generate ? static_cast<std::size_t>(std::max(options.max_new_tokens, 0))
                                                            : golds[i].size();
    longest = std::max(longest, prompts.back().tokens.size() + tail);
    last_stats_.prompt_tokens += prompts.back().tokens.size();
  }
  std::vector<SampleOutput> outputs;
  outputs.reserve(batch.size());
  arena_->execute([&] {
    std::unique_ptr<SharedPrefix> shared;
    const int prefix = options_.reuse_prefix && !reads_whole_prompt(intervention) ? shared_prefix_length(prompts) : 0;
    const std::size_t context = model_->config().context_length;
    if (prefix > 0 && (context == 0 || longest <= context)) {
      shared.reset(new SharedPrefix{Sequence(*model_, static_cast<int>(longest), scales), prefix});
      model_->forward(shared->seq, std::span<const std::int32_t>(prompts.front().tokens).first(prefix), {}, {});
      last_stats_.prefix_tokens = static_cast<std::size_t>(prefix);
      last_stats_.forward_tokens += static_cast<std::size_t>(prefix);
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      try {
        outputs.push_back(run_one(batch[i], prompts[i], golds[i], intervention, scales, options, shared.get()));
      } catch (const BackendError&) {
        throw;
      } catch (const std::domain_error& e) {  // NaN / infinity in the forward pass: the input overflows
        throw InvalidInputError("engine: item '" + batch[i].id + "': " + e.what());
      } catch (const std::exception& e) {
        throw BackendError("engine: item '" + batch[i].id + "': " + e.what());
      }
    }
  });
  return outputs;
}

ChatWrapper engine_chat_wrapper(const GgufFile& file, const ModelIdentity& identity) {
  const ChatTemplate chat = ChatTemplate::from_gguf(file);
  return ChatWrapper{chat_template_name(identity), [chat](const std::string& message) {
                       const RenderedPrompt r = chat.render_user(message);
                       return WrappedUserMessage{r.text, r.content_begin};
                     }};
}

std::optional<ChatWrapper> EngineBackend::chat_wrapper() const { return engine_chat_wrapper(model_->file(), identity()); }

bool reads_whole_prompt(const Intervention& iv) { return intervention_needs(iv).prompt_alone; }

std::vector<hooks::TokenSpan> hook_spans(const PreparedPrompt& prompt) {
  std::vector<hooks::TokenSpan> spans;
  for (const TokenSpan& c : prompt.chunk_tokens) spans.push_back({static_cast<int>(c.begin), static_cast<int>(c.end)});
  return spans;
}

}  // namespace midtune::engine
