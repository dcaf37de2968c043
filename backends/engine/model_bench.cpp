#include "backends/engine/model_bench.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <tbb/task_arena.h>

#include "backends/engine/model.hpp"
#include "backends/engine/op_profile.hpp"

namespace midtune::engine {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double cpu_seconds_since(std::clock_t start) { return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC; }

}  // namespace

// Same recurrence as bench/engine_bench.py's bench_tokens().
std::vector<std::int32_t> bench_tokens(int count, int vocab) {
  std::vector<std::int32_t> out(count);
  // Skip the first 100 ids (special tokens) when the vocabulary is large enough.
  const int first = vocab > 200 ? 100 : 0;
  std::uint64_t state = 12345;
  for (int i = 0; i < count; ++i) {
    state = (state * 6364136223846793005ULL + 1442695040888963407ULL) & 0xffffffffffffffffULL;
    out[i] = static_cast<std::int32_t>(first + (state >> 33) % static_cast<std::uint64_t>(vocab - first));
  }
  return out;
}

nlohmann::json ModelBenchResult::to_json(const ModelBenchOptions& options) const {
  return {{"engine", "midtune"},
          {"isa", to_string(options.isa)},
          {"kv_cache", to_string(options.kv_cache)},
          {"threads", options.threads},
          {"prompt_tokens", options.prompt_tokens},
          {"decode_tokens", options.decode_tokens},
          {"load_s", load_seconds},
          {"prefill_tok_s", prefill_tokens_per_second},
          {"decode_tok_s", decode_tokens_per_second},
          {"prefill_tok_per_cpu_s", prefill_tokens_per_cpu_second},
          {"decode_tok_per_cpu_s", decode_tokens_per_cpu_second}};
}

ModelBenchResult bench_model(const std::filesystem::path& model_path, const ModelBenchOptions& options) {
  if (options.prompt_tokens <= 0 || options.decode_tokens < 0 || options.threads <= 0 || options.repeats <= 0) {
    throw std::invalid_argument("bench-model: prompt tokens, threads and repeats must be positive");
  }
  ModelBenchResult result;
  tbb::task_arena arena(options.threads);
  arena.execute([&] {
    auto start = std::chrono::steady_clock::now();
    Model model(model_path, options.isa, false, options.kv_cache);
    result.load_seconds = seconds_since(start);
    const ModelConfig& c = model.config();
    const std::vector<std::int32_t> tokens = bench_tokens(options.prompt_tokens + options.decode_tokens, model.vocab());
    const std::span<const std::int32_t> prompt(tokens.data(), options.prompt_tokens);
    const int last = options.prompt_tokens - 1;
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < options.repeats; ++r) {
      Sequence seq(model, options.prompt_tokens + options.decode_tokens, SequenceScales::ones(c.layers, c.heads));
      start = std::chrono::steady_clock::now();
      const std::clock_t cpu_start = std::clock();
      model.forward(seq, prompt, {}, std::span<const int>(&last, 1));
      best = std::min(best, seconds_since(start));
      best_cpu = std::min(best_cpu, cpu_seconds_since(cpu_start));
      if (r + 1 == options.repeats && options.decode_tokens > 0) {
        // Decode: one token at a time after the prompt, logits every step.
        const int zero = 0;
        model.set_op_profile(options.decode_profile);
        start = std::chrono::steady_clock::now();
        const std::clock_t cpu_start = std::clock();
        for (int i = 0; i < options.decode_tokens; ++i) {
          model.forward(seq, std::span<const std::int32_t>(&tokens[options.prompt_tokens + i], 1), {},
                        std::span<const int>(&zero, 1));
        }
        result.decode_tokens_per_second = options.decode_tokens / seconds_since(start);
        result.decode_tokens_per_cpu_second = options.decode_tokens / cpu_seconds_since(cpu_start);
        model.set_op_profile(nullptr);
      }
    }
    result.prefill_tokens_per_second = options.prompt_tokens / best;
    result.prefill_tokens_per_cpu_second = options.prompt_tokens / best_cpu;
  });
  return result;
}

}  // namespace midtune::engine
