// The in-tree engine as a midtune::Backend, on any Device (the CPU, a GPU,
// the host reference) with either of two schedules. It tokenises each
// BatchItem, resolves the Intervention into per-(layer, head) RoPE scales
// and runs the forward pass in one of two modes:
//   generate        greedy decoding up to max_new_tokens or an end-of-
//                   generation token; returns the text;
//   teacher_forced  ONE forward pass over prompt + gold tokens; the gold is
//                   "emitted first" when the argmax equals the gold token at
//                   every answer position; gold_logprob = sum of log-softmax.
// Ms-PoE, CALIOPE, SIW and PHS go through hooks::EngineIntervention
// (backends/engine/engine_hooks.hpp): with any of them the prompt is
// prefilled alone (the hooks read its last query) and the teacher-forced gold
// tokens follow in one call, equal to one decode step per gold token as
// generate runs it (under PHS every gold row counts as its step's last token).
//
// The schedule is how a run's items go through the model, and the only
// thing that differs between devices' needs; both give the same answers
// (test ASchedulesAnswersAreTheOthers):
//   per_sequence  one item after another (schedule_per_sequence.cpp), a
//                 prompt prefix the whole batch shares prefilled once: few
//                 cores gain nothing from wider passes, and the prefix is
//                 work saved (the CPU);
//   packed        consecutive items packed into passes of at most
//                 batch_tokens tokens, decode steps of every unfinished item
//                 together, argmax and gold log-probability reduced on the
//                 device (schedule_packed.cpp): a GPU needs the width.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tbb/task_arena.h>

#include "backends/backend.hpp"
#include "backends/engine/model.hpp"
#include "backends/engine/gguf/tokenizer.hpp"
#include "backends/engine/hooks/token_span.hpp"

namespace midtune::engine {

enum class Schedule { per_sequence, packed };

struct EngineOptions {
  int threads = 0;  // 0 = every core oneTBB sees
  Schedule schedule = Schedule::per_sequence;
  // per_sequence: prefill the prompt prefix shared by a whole batch once
  // (plain and RoPE-scale interventions only); off only to measure what it
  // saves.
  bool reuse_prefix = true;
  // packed: tokens per pass (prompts + answers); 0 = what a quarter of the
  // device memory left after the weights holds, at most 65536.
  std::size_t batch_tokens = 0;

  // The CPU device's (the constructor without a device):
  Isa isa = best_isa();
  // backend.precision: fp32 — every matrix dequantised to F32 at load and
  // multiplied with fp32 activations: the file's own answers, where the
  // default int8-activation path of the integer types parts from them on
  // near-ties (4 bytes a weight; float products, ~2.2x slower on SmolLM2).
  // Marked in the model identity, so its results never share a cache with
  // the default's.
  bool fp32 = false;
  // backend.kv_cache: bf16 — keys (after RoPE) and values rounded once to
  // bf16 as cached, attention in fp32: half the cache's memory and the
  // memory traffic of long-context decode, other numbers (marked in the
  // identity like fp32).
  KvForm kv_cache = KvForm::fp32;
};

// A prompt as the engine sees it.
struct PreparedPrompt {
  std::vector<std::int32_t> tokens;
  std::vector<TokenSpan> chunk_tokens;  // BatchItem::chunks as token index ranges
};

// What the last run() computed, for tests and benchmarks.
struct RunStats {
  std::size_t prompt_tokens = 0;    // over the batch
  std::size_t prefix_tokens = 0;    // per_sequence: prefilled once and shared by every item (0 = no reuse)
  std::size_t forward_tokens = 0;   // per_sequence: tokens that went through the layers
  int passes = 0;                   // packed: passes through the model
};

// Schedule::packed's batch_tokens 0 resolved: what a quarter of the device
// memory free now holds (activations and KV cache per token), in
// [256, 65536]. Call right after loading the model, as the backend does.
std::size_t default_batch_tokens(const Model& model, const Device& device);

// The passes of a packed run: [begin, end) of consecutive items whose
// tokens sum to at most `batch_tokens` (an item larger than that gets a
// pass alone).
std::vector<std::pair<std::size_t, std::size_t>> pass_groups(std::span<const std::size_t> item_tokens,
                                                             std::size_t batch_tokens);

// What every device's engine backend shares: the model's identity (cache
// keys), a BatchItem tokenised with its chunks, the GGUF's chat template, and
// which interventions read the whole prompt (those whose mechanisms need the
// prompt alone, methods/method_types.hpp: the prompt is prefilled alone and
// hooks::EngineIntervention drives the pass).
// The content hash is the model's, taken of the bytes it loaded.
ModelIdentity engine_identity(const Model& model, const Tokenizer& tokenizer);
PreparedPrompt prepare_prompt(const Tokenizer& tokenizer, const BatchItem& item);
ChatWrapper engine_chat_wrapper(const GgufFile& file, const ModelIdentity& identity);
bool reads_whole_prompt(const Intervention& intervention);
// What a sequence of `intervention` fixes for its life (hooks::sequence_scales);
// validates first (std::invalid_argument).
SequenceScales intervention_sequence_scales(const ModelConfig& config, const Intervention& intervention);
std::vector<hooks::TokenSpan> hook_spans(const PreparedPrompt& prompt);

class EngineBackend : public Backend {
 public:
  // On the CPU device (devices/cpu/cpu_device.hpp) with options' isa, fp32 and
  // kv_cache; its identity's precision is absent for the default (native
  // products, fp32 cache), so that its results keep their keys.
  explicit EngineBackend(const std::filesystem::path& model_path, EngineOptions options = {});
  // On `device` (a GPU, the host reference; set up before: the model loads
  // in its forms). `precision` names its arithmetic in the identity and the
  // execution record (devices::DeviceOps::precision()).
  EngineBackend(const std::filesystem::path& model_path, std::unique_ptr<Device> device, std::string precision,
                EngineOptions options);
  ~EngineBackend() override;

  ModelIdentity identity() const override;
  std::vector<SampleOutput> run(const Intervention& intervention, const std::vector<BatchItem>& batch,
                                const RunOptions& options) override;
  void validate(const Intervention& intervention) const override;
  // The GGUF's chat template.
  std::optional<ChatWrapper> chat_wrapper() const override;
  // {"device", "precision"}; on the CPU also "kernel_path" and "threads".
  nlohmann::json execution() const override;

  Model& model() const { return *model_; }
  const RunStats& last_run_stats() const { return last_stats_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  std::size_t batch_tokens() const { return batch_tokens_; }
  // Special tokens parsed; BOS only when the model's metadata asks for it.
  PreparedPrompt prepare(const BatchItem& item) const;
  // What a sequence of `intervention` fixes for its life (RoPE scales per
  // (layer, head), score factors, distance remap); validates first.
  SequenceScales sequence_scales(const Intervention& intervention) const;
  // Greedy continuation token ids (stops after an end-of-generation token,
  // which is not returned).
  // positions/hooks: from hooks::EngineIntervention; empty/nullptr = plain.
  std::vector<std::int32_t> generate_tokens(const std::vector<std::int32_t>& prompt, const SequenceScales& scales,
                                            int max_new_tokens, std::span<const double> positions = {},
                                            const ForwardHooks* hooks = nullptr) const;

 private:
  struct Item;
  struct SharedPrefix;
  EngineBackend(const std::filesystem::path& model_path, std::unique_ptr<Device> device, EngineOptions options);
  // The schedules (schedule_per_sequence.cpp, schedule_packed.cpp); items
  // are prepared and checked, their outputs filled in place.
  void run_per_sequence(std::vector<Item>& items, const Intervention& intervention, const SequenceScales& plain,
                        const RunOptions& options);
  void run_one(Item& item, const RunOptions& options, SharedPrefix* shared);
  void run_packed(std::vector<Item>& items, const RunOptions& options);
  void run_packed_teacher_forced(std::vector<Item>& group);
  void run_packed_generate(std::vector<Item>& group, int max_new_tokens);
  // Greedy decoding on `seq` after feeding it `rest` (the prompt tokens not yet in it).
  std::vector<std::int32_t> generate_on(Sequence& seq, std::span<const std::int32_t> rest, int max_new_tokens,
                                        std::span<const double> positions, const ForwardHooks* hooks) const;

  EngineOptions options_;
  RunStats last_stats_;
  std::unique_ptr<Device> device_;  // null: the model's own CPU device; declared before the model that uses it
  std::unique_ptr<Model> model_;
  Tokenizer tokenizer_;
  std::unique_ptr<tbb::task_arena> arena_;
  ModelIdentity identity_;
  nlohmann::json execution_;
  std::size_t batch_tokens_ = 0;
};

}  // namespace midtune::engine
