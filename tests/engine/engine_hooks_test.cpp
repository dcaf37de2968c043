// The mechanism table (methods/method_types.hpp, mechanism_needs) against
// what hooks::EngineIntervention actually builds, method by method on the
// tiny random Llama: the backends decide from the table alone whether the
// prompt is prefilled alone, in one call, and whether a GPU pass makes a host
// round trip, so the table must say what the hooks do.
#include <gtest/gtest.h>

#include <vector>

#include "backends/engine/engine_hooks.hpp"
#include "backends/engine/model.hpp"
#include "methods/registry.hpp"
#include "tests/engine/tiny_llama_gguf.hpp"

namespace midtune::engine {
namespace {

TEST(EngineHooks, EveryMechanismNeedsWhatItsHooksDo) {
  const testing::MemoryFile file(testing::TinyLlama{}.bytes());
  Model model(file.path());
  const int prompt_tokens = 12;
  const std::vector<hooks::TokenSpan> chunks = {{1, 4}, {4, 7}, {7, 10}};
  for (const MethodModule* m : method_modules()) {
    SCOPED_TRACE(m->name);
    Intervention probe;
    m->set_probe(probe);
    const hooks::EngineIntervention hooked(model, probe, prompt_tokens, chunks);
    const MechanismNeeds needs = intervention_needs(probe);
    const ForwardHooks* h = hooked.hooks();
    // Decided from the prompt: a hook reads it, or its positions are remapped.
    EXPECT_EQ(needs.prompt_alone, h != nullptr || !hooked.prompt_positions().empty());
    EXPECT_EQ(needs.one_call_prefill, h != nullptr && h->whole_prompt);
    // Rows handed to a host callback within the pass.
    EXPECT_EQ(needs.host_round_trip, h != nullptr && (h->head_rope_scales || h->last_query_row));
  }
}

}  // namespace
}  // namespace midtune::engine
