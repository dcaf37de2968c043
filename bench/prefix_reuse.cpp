// What sharing a batch's prompt prefix saves: the search
// split of an experiment file, evaluated as the run loop evaluates it (one
// batch, the file's metric), by the engine with prefix reuse and by the same
// engine without it, alternating, in one process. Prints prompts/s for each,
// the ratio, the tokens each put through the layers, and checks that both
// gave the same outputs.
//
//   build/bench/prefix_reuse experiments/lpes-kv-smollm2.yaml [--repeats 3] [--threads 2]
#include <chrono>
#include <cmath>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "backends/engine/engine_backend.hpp"
#include "core/cli/run_setup.hpp"
#include "core/experiment/experiment.hpp"

using namespace midtune;

int main(int argc, char** argv) {
  std::string file;
  int repeats = 3, threads = 2;
  CLI::App app{"Prompt-prefix reuse in the engine: with vs without, on an experiment's search split"};
  app.add_option("experiment", file, "experiment YAML with an engine backend")->required();
  app.add_option("--repeats", repeats, "alternating timed runs of each");
  app.add_option("--threads", threads, "engine threads");
  CLI11_PARSE(app, argc, argv);
  try {
    const Experiment experiment = load_experiment(file);
    if (experiment.backend.kind != "engine") throw std::invalid_argument(file + ": backend.kind must be engine");
    engine::EngineOptions with, without;
    with.threads = without.threads = threads;
    without.reuse_prefix = false;
    engine::EngineBackend reuse(experiment.backend.model, with), fresh(experiment.backend.model, without);

    // The search split wrapped for this model, as ga-run builds it.
    const auto prepared = prepare_split(experiment, reuse, datasets::Split::search);
    const std::vector<BatchItem>& batch = prepared->inputs.items;
    const RunOptions options = prepared->inputs.run_options;

    double seconds[2] = {0, 0};
    std::vector<SampleOutput> outputs[2];
    engine::RunStats stats[2];
    engine::EngineBackend* engines[2] = {&reuse, &fresh};
    for (int r = 0; r < repeats; ++r) {
      for (int e = 0; e < 2; ++e) {
        const auto start = std::chrono::steady_clock::now();
        outputs[e] = engines[e]->run(Intervention{}, batch, options);
        seconds[e] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        stats[e] = engines[e]->last_run_stats();
      }
    }
    std::size_t differ = 0;
    double worst_logprob = 0.0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      differ += outputs[0][i].gold_emitted_first != outputs[1][i].gold_emitted_first ||
                outputs[0][i].output_text != outputs[1][i].output_text;
      worst_logprob = std::max(worst_logprob, std::fabs(outputs[0][i].gold_logprob - outputs[1][i].gold_logprob));
    }
    const double n = static_cast<double>(batch.size()) * repeats;
    std::printf("%s: %zu prompts, %zu prompt tokens, shared prefix %zu tokens, %d threads, %d repeats\n",
                file.c_str(), batch.size(), stats[0].prompt_tokens, stats[0].prefix_tokens, threads, repeats);
    std::printf("| engine             | prompts/s | tokens through the layers |\n|---|---|---|\n");
    std::printf("| prefix reuse       | %9.2f | %zu |\n", n / seconds[0], stats[0].forward_tokens);
    std::printf("| no reuse (peer)    | %9.2f | %zu |\n", n / seconds[1], stats[1].forward_tokens);
    std::printf("ratio (reuse / no reuse): %.3fx; outputs differing: %zu; worst |d gold log-prob|: %.2g\n",
                seconds[1] / seconds[0], differ, worst_logprob);
    return differ == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "prefix_reuse: %s\n", error.what());
    return 1;
  }
}
