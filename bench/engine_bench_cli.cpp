// engine_bench_cli: one JSON line with the engine's prefill and decode
// tokens/s (driven by bench/engine_bench.py next to llama.cpp).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "backends/engine/model_bench.hpp"
#include "backends/engine/op_profile.hpp"

int main(int argc, char** argv) {
  CLI::App app{"engine_bench_cli: prefill / decode throughput of the midtune engine"};
  std::string model;
  std::string isa;
  midtune::engine::ModelBenchOptions options;
  app.add_option("--model", model, "GGUF model path")->required();
  app.add_option("--prompt-tokens", options.prompt_tokens, "prompt length");
  app.add_option("--decode-tokens", options.decode_tokens, "tokens decoded after the prompt");
  app.add_option("--threads", options.threads, "threads");
  app.add_option("--repeats", options.repeats, "prefill repeats (best is reported)");
  app.add_option("--isa", isa, "scalar | avx2 | avxvnni | avx512 | avx512bf16 (default: best available)");
  std::string kv_cache = "fp32";
  app.add_option("--kv-cache", kv_cache, "fp32 | bf16 (keys and values cached in bf16: half the cache's bytes)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  bool profile = false;
  app.add_flag("--profile", profile,
               "also print the decode steps' time op by op on stderr (each op timed apart: slower overall)");
  CLI11_PARSE(app, argc, argv);
  midtune::engine::OpProfile op_profile;
  if (profile) options.decode_profile = &op_profile;
  try {
    options.kv_cache = midtune::engine::parse_kv_form(kv_cache, "--kv-cache");
    if (!isa.empty()) {
      options.isa = midtune::engine::parse_isa(isa, "--isa");
    }
    const auto result = midtune::engine::bench_model(model, options);
    std::printf("%s\n", result.to_json(options).dump().c_str());
    if (profile) {
      const double steps = options.decode_tokens > 0 ? options.decode_tokens : 1;
      for (const auto& row : op_profile.rows()) {
        std::fprintf(stderr, "%-48s %8zu calls %9.3f ms a step\n", row.op.c_str(), row.calls,
                     1e3 * row.seconds / steps);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_bench_cli: %s\n", e.what());
    return 1;
  }
  return 0;
}
