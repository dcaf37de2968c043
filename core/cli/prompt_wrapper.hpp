// How a backend wraps the dataset's user messages: the in-tree engine in its
// GGUF's chat template, a server in the template its /v1/info names, the test
// double not at all. One definition, so `ga-run`, `ga-run phs-search` and the
// benchmarks build identical prompts (and slice identities / cache keys).
#pragma once

#include "backends/backend.hpp"
#include "backends/engine/engine_backend.hpp"
#include "datasets/prompts.hpp"

namespace midtune {

// The model's own chat template; the answer starts the assistant turn.
datasets::PromptWrapper engine_prompt_wrapper(const engine::EngineBackend& backend);

// engine_prompt_wrapper for the engine, the served template for a server
// (under the engine's name, so served and in-process searches share cache
// keys), identity otherwise.
datasets::PromptWrapper prompt_wrapper(const Backend& backend);

}  // namespace midtune
