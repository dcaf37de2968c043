#include "backends/engine/engine_backend.hpp"

#include "backends/engine/gguf/chat_template.hpp"
#include "backends/engine/engine_hooks.hpp"
#include "backends/engine/engine_schedule.hpp"
#include "methods/registry.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace midtune::engine {

namespace {
// How a bf16 KV cache is named in identities, as on the GPU engine.
const std::string kBf16KvCache = ", bf16 KV cache";
}  // namespace

EngineBackend::EngineBackend(const std::filesystem::path& model_path, std::unique_ptr<Device> device,
                             EngineOptions options)
    : options_(options),
      device_(std::move(device)),
      model_(device_ ? std::make_unique<Model>(model_path, *device_)
                     : std::make_unique<Model>(model_path, options.isa, options.fp32, options.kv_cache)),
      tokenizer_(Tokenizer::from_gguf(model_->file())),
      arena_(options.threads > 0 ? std::make_unique<tbb::task_arena>(options.threads)
                                 : std::make_unique<tbb::task_arena>()) {
  if (tokenizer_.vocab_size() > static_cast<std::size_t>(model_->vocab())) {
    throw std::invalid_argument(model_path.string() + ": tokenizer has " + std::to_string(tokenizer_.vocab_size()) +
                                " tokens but the output matrix only " + std::to_string(model_->vocab()));
  }
  identity_ = engine_identity(*model_, tokenizer_);
  if (options_.schedule == Schedule::packed) {
    batch_tokens_ = options_.batch_tokens != 0 ? options_.batch_tokens : default_batch_tokens(*model_, model_->device());
  }
}

EngineBackend::EngineBackend(const std::filesystem::path& model_path, EngineOptions options)
    : EngineBackend(model_path, nullptr, options) {
  // Absent for the default (native products, fp32 cache), so that its
  // results keep their keys; every other choice computes other numbers.
  if (options_.fp32) identity_.precision = "fp32";
  if (options_.kv_cache == KvForm::bf16) identity_.precision = (options_.fp32 ? "fp32" : "native") + kBf16KvCache;
  execution_ = {{"device", "cpu"},
                {"kernel_path", to_string(options_.isa)},
                {"threads", arena_->max_concurrency()},
                {"precision", std::string(options_.fp32 ? "fp32" : "int8 activations (float types at their own precision)") +
                                  (options_.kv_cache == KvForm::bf16 ? kBf16KvCache : "")}};
}

EngineBackend::EngineBackend(const std::filesystem::path& model_path, std::unique_ptr<Device> device,
                             std::string precision, EngineOptions options)
    : EngineBackend(model_path, std::move(device), options) {
  // Another device's products give other answers than the CPU engine's:
  // their evaluations never share cache entries or a population.
  identity_.precision = precision;
  execution_ = {{"device", device_->name()}, {"precision", precision}};
}

EngineBackend::~EngineBackend() = default;

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

nlohmann::json EngineBackend::execution() const { return execution_; }

void EngineBackend::validate(const Intervention& intervention) const {
  validate_intervention(intervention, hooks::shape_of(*model_));
}

SequenceScales intervention_sequence_scales(const ModelConfig& c, const Intervention& intervention) {
  validate_intervention(intervention, hooks::shape_of(c));
  return hooks::sequence_scales(c, intervention);
}

SequenceScales EngineBackend::sequence_scales(const Intervention& intervention) const {
  return intervention_sequence_scales(model_->config(), intervention);
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

std::vector<SampleOutput> EngineBackend::run(const Intervention& intervention, const std::vector<BatchItem>& batch,
                                             const RunOptions& options) {
  SequenceScales plain;
  try {
    plain = sequence_scales(intervention);
  } catch (const std::invalid_argument& e) {
    throw InvalidInputError(std::string("engine: invalid intervention: ") + e.what());
  }
  last_stats_ = {};
  // Every item prepared and checked before any is computed.
  const std::size_t context = model_->config().context_length;
  std::vector<Item> items(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Item& it = items[i];
    it.item = &batch[i];
    const std::string& id = batch[i].id;
    try {
      it.prompt = prepare(batch[i]);
    } catch (const BackendError&) {
      throw;
    } catch (const std::exception& e) {
      throw BackendError("engine: item '" + id + "': " + e.what());
    }
    if (it.prompt.tokens.empty()) throw InvalidInputError("item '" + id + "': empty prompt");
    const std::size_t P = it.prompt.tokens.size();
    if (options.mode == Mode::teacher_forced) {
      it.gold = tokenizer_.encode(batch[i].gold, false, false);
      if (it.gold.empty()) throw BackendError("item '" + id + "': teacher_forced needs a non-empty gold answer");
      it.tokens = P + it.gold.size() - 1;  // the last gold token is never an input
      if (context > 0 && it.tokens > context) {
        throw InvalidInputError("item '" + id + "': " + std::to_string(it.tokens) +
                                " tokens exceed the model context " + std::to_string(context));
      }
    } else {
      const std::size_t new_tokens = static_cast<std::size_t>(std::max(options.max_new_tokens, 0));
      it.tokens = P + new_tokens;
      if (context > 0 && it.tokens > context) {
        throw InvalidInputError("item '" + id + "': " + std::to_string(P) + " prompt tokens + " +
                                std::to_string(new_tokens) + " new exceed the model context " +
                                std::to_string(context));
      }
    }
    // Interventions that read the whole prompt (its chunks, its last query).
    if (reads_whole_prompt(intervention)) {
      try {
        it.hooked = std::make_unique<hooks::EngineIntervention>(*model_, intervention, static_cast<int>(P),
                                                                hook_spans(it.prompt));
      } catch (const std::invalid_argument& e) {
        throw BackendError("engine: item '" + id + "': " + e.what());
      }
    }
    it.scales = it.hooked ? &it.hooked->sequence_scales() : &plain;
    it.out.id = id;
    it.out.prompt_tokens = static_cast<int>(P);
    last_stats_.prompt_tokens += P;
  }
  arena_->execute([&] {
    if (options_.schedule == Schedule::packed) {
      run_packed(items, options);
    } else {
      run_per_sequence(items, intervention, plain, options);
    }
  });
  std::vector<SampleOutput> outputs;
  outputs.reserve(items.size());
  for (Item& it : items) {
    if (options.mode == Mode::generate)
      it.out.output_text = tokenizer_.decode_continuation(it.prompt.tokens.back(), it.generated, false);
    outputs.push_back(std::move(it.out));
  }
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
