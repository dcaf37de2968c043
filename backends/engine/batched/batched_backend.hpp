// The batched engine as a midtune::Backend (backend.device: cuda): the same
// tokenisation, chat template, interventions and answers as EngineBackend,
// with each evaluation batch run as a few packed passes of Model:
//   teacher_forced  one pass over every item's prompt + gold tokens (items
//                   whose intervention reads the whole prompt: their prompts
//                   in that pass, their gold tokens in a second, as the CPU
//                   engine does); argmax and gold log-probability reduced on
//                   the device;
//   generate        the prompts in one pass, then greedy decode steps for
//                   every unfinished item at once; an item leaves the batch
//                   at its end-of-generation token or max_new_tokens.
// Items are grouped so that a pass holds at most `batch_tokens` tokens
// (activations and KV caches must fit the device).
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "backends/engine/batched/device_ops.hpp"
#include "backends/engine/model.hpp"
#include "backends/engine/engine_backend.hpp"
#include "backends/engine/gguf/tokenizer.hpp"

namespace midtune::engine::batched {

struct BatchedOptions {
  // Tokens per pass (prompts + answers); 0 = what a quarter of the device
  // memory left after the weights holds, at most 65536.
  std::size_t batch_tokens = 0;
};

// BatchedOptions::batch_tokens 0 resolved: what a quarter of the device
// memory free now holds (activations and KV cache per token), in
// [256, 65536]. Call right after loading the model, as the backend does.
std::size_t default_batch_tokens(const Model& model, const Device& device);

// The passes of one run: [begin, end) of consecutive items whose tokens sum
// to at most `batch_tokens` (an item larger than that gets a pass alone).
std::vector<std::pair<std::size_t, std::size_t>> pass_groups(std::span<const std::size_t> item_tokens,
                                                             std::size_t batch_tokens);

class BatchedBackend : public Backend {
 public:
  // The device's weight form (DeviceOps::set_weight_form) is set before.
  BatchedBackend(const std::filesystem::path& model_path, std::unique_ptr<DeviceOps> device,
                 BatchedOptions options = {});

  ModelIdentity identity() const override;
  // {"device": the device's name, "precision": DeviceOps::precision()}.
  nlohmann::json execution() const override;
  std::vector<SampleOutput> run(const Intervention& intervention, const std::vector<BatchItem>& batch,
                                const RunOptions& options) override;
  void validate(const Intervention& intervention) const override;
  std::optional<ChatWrapper> chat_wrapper() const override;

  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  std::size_t batch_tokens() const { return batch_tokens_; }
  // Passes through the model in the last run() (for tests and benchmarks).
  int last_run_passes() const { return last_passes_; }

 private:
  struct Item;
  void run_teacher_forced(std::vector<Item>& items);
  void run_generate(std::vector<Item>& items, int max_new_tokens);

  std::unique_ptr<DeviceOps> device_;
  std::unique_ptr<Model> model_;
  Tokenizer tokenizer_;
  ModelIdentity identity_;
  std::size_t batch_tokens_ = 0;
  int last_passes_ = 0;
};

}  // namespace midtune::engine::batched
