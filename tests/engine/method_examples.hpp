// One intervention of every method, each strong enough to move the small
// two-layer models of tiny_arch_gguf.hpp, for tests that run every method on
// every architecture. Chunk boundaries to go with them: kExampleChunks (the
// last ones fall inside llama_swa's window of 8 keys).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/hooks/token_span.hpp"
#include "methods/registry.hpp"

namespace midtune::testing {

inline const std::map<std::string, nlohmann::json>& method_examples() {
  static const std::map<std::string, nlohmann::json> m = {
      {"lpes", {{"rope_scale", {{1.5}, {3.0}}}}},
      {"pi", {{"rope_scale", {{2.0}}}}},
      {"mspoe",
       {{"mspoe",
         {{"min_ratio", 1.2},
          {"max_ratio", 1.8},
          {"first_layer", 0},
          {"alpha", 3.0},
          {"order", "awareness"},
          {"reference_spacing", false}}}}},
      // decay: a gap at every chunk boundary, so llama_swa's window sees some.
      {"caliope", {{"position_map", {{"kind", "decay"}, {"delta0", 20.0}, {"lambda", 0.9}}}}},
      {"siw", {{"siw", {{"alpha_dense", 0.5}, {"alpha_sparse", 1.5}, {"sigma", 1.0}, {"layers", {0, 1}}}}}},
      {"phs", {{"hidden_channel", {{"channel", 3}, {"scale", 0.0}, {"layers", {0, 1}}}}}},
      {"temperature", {{"attention_temperature", {{"temperature", 0.5}, {"layers", {1}}}}}},
      // Windows shorter than llama_swa's 8 keys (make_arch_fixtures.py REMAP_EXAMPLES).
      {"selfextend", {{"self_extend", {{"group", 3}, {"window", 5}, {"layers", {0, 1}}}}}},
      {"string", {{"string_shift", {{"shift", 6}, {"window", 2}, {"layers", {0, 1}}}}}},
  };
  return m;
}

// Whether `method` (a method's name, or "plain") applies to the model: a
// method acting on RoPE positions does not without RoPE (mpt), and is
// refused there by name.
inline bool method_applies(const ModelConfig& config, const std::string& method) {
  if (method == "plain" || config.has_rope()) return true;
  const MethodModule& module = method_named(method);
  return module.mechanism && !mechanism_needs(*module.mechanism).rope_positions;
}

inline const std::vector<engine::hooks::TokenSpan> kExampleChunks = {{4, 12}, {12, 20}, {20, 28}, {28, 31}, {31, 34}};

}  // namespace midtune::testing
