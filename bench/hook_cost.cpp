// Cost of each method engine hook: prefill tokens/s of the
// plain engine and of the engine with each method at its paper setting, in
// one process, methods alternating round by round (best of --repeats each),
// printed as a ratio to plain. The papers report Ms-PoE at 1.45x the latency
// of a single pass and PHS at ~1.45x; the aim here is under 1.2x each.
// A second table times teacher_forced scoring of one prompt under each hook:
// one decode step per gold token (the peer) vs the gold tokens in one call.
//
// The prompt is bench_tokens() (the same ids bench/engine_bench.py uses) cut
// into --chunks equal chunks between a 16-token head and tail, so SIW finds
// dense chunks and CALIOPE remaps per chunk as they would on KV retrieval.
//
//   build/bench/hook_cost --model M.gguf --prompt-tokens 512 2048 --threads 2
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <tbb/task_arena.h>

#include "backends/engine/engine_backend.hpp"
#include "backends/engine/engine_hooks.hpp"
#include "backends/engine/model.hpp"
#include "backends/engine/model_bench.hpp"

using namespace midtune;
using namespace midtune::engine;

namespace {

struct Method {
  std::string name;
  Intervention intervention;
};

std::vector<int> layer_range(int first, int last) {
  std::vector<int> out;
  for (int l = first; l <= last; ++l) out.push_back(l);
  return out;
}

// Paper settings (docs/methods.md), layer ranges scaled to the model's depth
// where the paper's are for 32 layers.
std::vector<Method> methods(int layers, int hidden) {
  const int third = layers / 3, two_thirds = 2 * layers / 3;
  const int phs_first = layers * 10 / 32, phs_last = layers * 25 / 32;
  Intervention mspoe, caliope, siw, phs, all;
  mspoe.mspoe = MsPoe{};  // 1.2-1.8, alpha 3, from layer 2, awareness order
  caliope.position_map = PositionMap{"moses"};
  siw.siw = Siw{0.5, 1.5, 1.0, layer_range(third, two_thirds)};
  phs.hidden_channel = HiddenChannel{hidden / 2, 0.0, layer_range(phs_first, phs_last)};
  all.mspoe = mspoe.mspoe;
  all.position_map = caliope.position_map;
  all.siw = siw.siw;
  all.hidden_channel = phs.hidden_channel;
  Intervention lpes;  // per-layer RoPE scales: the plain path with other tables
  for (int l = 0; l < layers; ++l) lpes.rope_scale.push_back({1.0 + 0.2 * l / std::max(1, layers - 1)});
  return {{"plain", {}}, {"lpes (per-layer RoPE)", lpes}, {"ms-poe", mspoe}, {"caliope", caliope},
          {"siw", siw}, {"phs", phs}, {"all four", all}};
}

double prefill_seconds(const EngineBackend& backend, const std::vector<std::int32_t>& prompt, const Intervention& iv,
                       const std::vector<hooks::TokenSpan>& chunks) {
  Model& model = backend.model();
  const int n = static_cast<int>(prompt.size()), last = n - 1;
  const auto start = std::chrono::steady_clock::now();
  if (iv.mspoe || iv.position_map || iv.siw || iv.hidden_channel) {
    // As EngineBackend::run_one: the hooks are built per prompt, then one prefill.
    const hooks::EngineIntervention hooked(model, iv, n, chunks);
    Sequence seq(model, n, hooked.sequence_scales());
    model.forward(seq, prompt, hooked.prompt_positions(), std::span<const int>(&last, 1), hooked.hooks());
  } else {
    Sequence seq(model, n, backend.sequence_scales(iv));
    model.forward(seq, prompt, {}, std::span<const int>(&last, 1));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `count` equal chunks between a 16-token head and tail.
std::vector<hooks::TokenSpan> equal_chunks(int tokens, int count) {
  std::vector<hooks::TokenSpan> chunks;
  const int body = tokens - 32;
  for (int k = 0; k < count; ++k) chunks.push_back({16 + body * k / count, 16 + body * (k + 1) / count});
  return chunks;
}

// teacher_forced after a hooked prefill: the gold tokens in one call, as
// EngineBackend::run does it, or one decode step per gold token, as generate
// does it (and as PHS scoring did before every row of a later call counted
// as a decode step's last token).
double teacher_forced_seconds(Model& model, const std::vector<std::int32_t>& prompt,
                              const std::vector<std::int32_t>& gold, const Intervention& iv,
                              const std::vector<hooks::TokenSpan>& chunks, bool one_call) {
  const int n = static_cast<int>(prompt.size()), last = n - 1;
  const auto start = std::chrono::steady_clock::now();
  const hooks::EngineIntervention hooked(model, iv, n, chunks);
  Sequence seq(model, n + static_cast<int>(gold.size()), hooked.sequence_scales());
  model.forward(seq, prompt, hooked.prompt_positions(), std::span<const int>(&last, 1), hooked.hooks());
  const ForwardHooks* forward_hooks = hooked.hooks();
  if (one_call) {
    std::vector<int> rows(gold.size());
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int>(i);
    model.forward(seq, gold, {}, rows, forward_hooks);
  } else {
    const int zero = 0;
    for (const std::int32_t& token : gold) model.forward(seq, std::span<const std::int32_t>(&token, 1), {}, std::span<const int>(&zero, 1), forward_hooks);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  std::vector<int> lengths = {512, 2048};
  int threads = 2, repeats = 3, chunk_count = 20, gold_tokens = 20;
  CLI::App app{"hook_cost: prefill tokens/s with each method hook, as a ratio to the plain engine"};
  app.add_option("--model", model_path, "GGUF model")->required();
  app.add_option("--prompt-tokens", lengths, "prompt lengths");
  app.add_option("--threads", threads, "engine threads");
  app.add_option("--repeats", repeats, "rounds (best of each method is kept)");
  app.add_option("--chunks", chunk_count, "chunks (KV pairs / documents) in the prompt");
  app.add_option("--gold-tokens", gold_tokens, "teacher-forced gold tokens (a UUID value is ~20)");
  CLI11_PARSE(app, argc, argv);
  try {
    tbb::task_arena arena(threads);
    arena.execute([&] {
      const EngineBackend backend(model_path);
      Model& model = backend.model();
      const ModelConfig& c = model.config();
      const auto list = methods(static_cast<int>(c.layers), static_cast<int>(c.hidden));
      std::printf("model %s, %d threads, %d chunks, best of %d rounds\n", model_path.c_str(), threads, chunk_count,
                  repeats);
      std::printf("| prompt | method | prefill tok/s | time vs plain |\n|---|---|---|---|\n");
      for (int n : lengths) {
        if (n < 32 + chunk_count) throw std::invalid_argument("--prompt-tokens " + std::to_string(n) + " is too short");
        const std::vector<std::int32_t> prompt = bench_tokens(n, model.vocab());
        const std::vector<hooks::TokenSpan> chunks = equal_chunks(n, chunk_count);
        std::vector<double> best(list.size(), 1e30);
        prefill_seconds(backend, prompt, {}, chunks);  // warm-up
        for (int r = 0; r < repeats; ++r)
          for (std::size_t m = 0; m < list.size(); ++m)
            best[m] = std::min(best[m], prefill_seconds(backend, prompt, list[m].intervention, chunks));
        for (std::size_t m = 0; m < list.size(); ++m)
          std::printf("| %d | %s | %.1f | %.3fx |\n", n, list[m].name.c_str(), n / best[m], best[m] / best[0]);
        std::fflush(stdout);
      }
      // Whole teacher_forced scoring of one prompt (prefill + gold) under each
      // hook: one decode step per gold token vs all gold tokens in one call.
      std::printf("\n| prompt | method | teacher_forced, %d gold tokens: step by step / one call |\n|---|---|---|\n",
                  gold_tokens);
      for (int n : lengths) {
        const std::vector<std::int32_t> prompt = bench_tokens(n, model.vocab());
        const std::vector<std::int32_t> gold = bench_tokens(gold_tokens, model.vocab());
        const std::vector<hooks::TokenSpan> chunks = equal_chunks(n, chunk_count);
        for (std::size_t m = 1; m < list.size(); ++m) {
          const Intervention& iv = list[m].intervention;
          if (!(iv.mspoe || iv.position_map || iv.siw || iv.hidden_channel)) continue;  // plain path: one pass anyway
          double steps = 1e30, one_call = 1e30;
          for (int r = 0; r < repeats; ++r) {
            steps = std::min(steps, teacher_forced_seconds(model, prompt, gold, iv, chunks, false));
            one_call = std::min(one_call, teacher_forced_seconds(model, prompt, gold, iv, chunks, true));
          }
          std::printf("| %d | %s | %.3fx |\n", n, list[m].name.c_str(), steps / one_call);
          std::fflush(stdout);
        }
      }
    });
  } catch (const std::exception& error) {
    std::fprintf(stderr, "hook_cost: %s\n", error.what());
    return 1;
  }
  return 0;
}
