// A backend's chat template (Backend::chat_wrapper) as the datasets' prompt
// wrapper. One definition, so `ga-run`, `ga-run phs-search` and the
// benchmarks build identical prompts (and slice identities / cache keys).
#pragma once

#include "backends/backend.hpp"
#include "datasets/prompts.hpp"

namespace midtune {

// The model's own chat template, the answer starting the assistant turn;
// identity when the backend has none.
datasets::PromptWrapper prompt_wrapper(const Backend& backend);

}  // namespace midtune
