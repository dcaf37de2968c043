// The model-side steps of `ga-run phs-search` (docs/methods.md "PHS", paper
// 001 §3.2): the residual stream averaged over random strings, captured with
// the in-tree engine's ForwardHooks::on_layer_output (engine-only, hence
// here), and the loss on a generated KV validation set under one
// Intervention (teacher_forced gold log-probability). The analysis between
// them is backends/engine/tools/phs_channel_search.hpp; the command is core/cli.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backends/backend.hpp"
#include "backends/engine/engine_backend.hpp"
#include "datasets/prompts.hpp"
#include "backends/engine/tools/phs_channel_search.hpp"

namespace midtune::engine::tools {

// `count` strings of random printable ASCII, tokenised without special
// tokens and cut to exactly `tokens` tokens (the reference code's corpus is
// such a string; no BOS, as its add_bos_token=False).
std::vector<std::vector<std::int32_t>> random_token_strings(const Tokenizer& tokenizer, int count, int tokens,
                                                            std::uint64_t seed);

// Each string through the model (plain, `threads` threads, 0 = all cores);
// the residual stream after every layer averaged over the strings.
// `progress(done)` is called after each string.
phs::LayerCurves average_residual_stream(Model& model,
                                         const std::vector<std::vector<std::int32_t>>& strings, int threads,
                                         const std::function<void(int done)>& progress = {});

struct KvValidationSpec {
  int prompts = 24;
  int pairs = 10;
  std::vector<double> gold_positions = {0.0, 0.5, 1.0};
  std::uint64_t seed = 5;
};

// Generated KV items (datasets::generate_kv_item), gold pair placed at the
// positions in turn, wrapped by `wrapper` (the model's chat template), answer
// primed.
std::vector<BatchItem> kv_validation_items(const datasets::PromptWrapper& wrapper, const KvValidationSpec& spec);

// Mean over prompts of -log p(gold answer tokens) (teacher_forced), nats.
double validation_loss(Backend& backend, const Intervention& intervention, const std::vector<BatchItem>& items);

}  // namespace midtune::engine::tools
