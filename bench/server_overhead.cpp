// Overhead of the server path (ServerBackend -> HTTP+JSON on 127.0.0.1 ->
// EvaluationServer -> backend) against calling the same backend in-process,
// for the same evaluation, measured in the same run. Prints both times and
// their ratio, plus the absolute overhead per item.
//   server_overhead [--model GGUF [--threads T]] [--items N] [--repeats R] [--pairs P]
// One backend object serves both paths, measured alternately so machine load
// drifts hit both alike. Without --model it is the synthetic test double,
// whose evaluation costs almost nothing: then the absolute overhead per item
// is the meaningful figure, not the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>

#include "backends/engine/engine_backend.hpp"
#include "backends/server/evaluation_server.hpp"
#include "backends/server/server_backend.hpp"
#include "backends/synthetic/synthetic_test_double.hpp"

namespace {

using namespace midtune;
using Clock = std::chrono::steady_clock;

// KV-retrieval-like prompts of `pairs` lines, one chunk per line.
std::vector<BatchItem> make_batch(int items, int pairs) {
  std::vector<BatchItem> batch;
  for (int i = 0; i < items; ++i) {
    BatchItem item;
    item.id = "bench-" + std::to_string(i);
    for (int p = 0; p < pairs; ++p) {
      const std::size_t begin = item.prompt_text.size();
      item.prompt_text += "key-" + std::to_string(i) + "-" + std::to_string(p) + ": value-" + std::to_string(p * 7919 % 10007) + "\n";
      item.chunks.push_back({begin, item.prompt_text.size()});
    }
    item.prompt_text += "What is the value of key-" + std::to_string(i) + "-" + std::to_string(pairs / 2) + "?";
    item.gold = "value-" + std::to_string((pairs / 2) * 7919 % 10007);
    item.gold_depth = static_cast<double>(i % 3) / 2.0;
    batch.push_back(std::move(item));
  }
  return batch;
}

double time_ms(Backend& backend, const Intervention& iv, const std::vector<BatchItem>& batch) {
  const auto start = Clock::now();
  const auto out = backend.run(iv, batch, RunOptions{Mode::teacher_forced, 16});
  if (out.size() != batch.size()) throw std::runtime_error("wrong output count");
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<Backend> make_backend(const std::string& model, int threads) {
  if (model.empty()) return std::make_unique<SyntheticTestDoubleBackend>(SyntheticTestDoubleConfig{});
  engine::EngineOptions options;
  options.threads = threads;
  return std::make_unique<engine::EngineBackend>(model, options);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"server path vs in-process evaluation overhead"};
  int items = 60, repeats = 15, pairs = 50, threads = 0;
  std::size_t chunk_items = 0;
  std::string model;
  app.add_option("--model", model, "GGUF model for the in-tree engine (default: synthetic test double)")
      ->check(CLI::ExistingFile);
  app.add_option("--threads", threads, "engine threads, 0 = all cores");
  app.add_option("--items", items, "items per evaluation")->check(CLI::Range(1, 1024));
  app.add_option("--repeats", repeats, "evaluations per path (median reported)")->check(CLI::Range(1, 10000));
  app.add_option("--pairs", pairs, "key/value lines per prompt")->check(CLI::Range(1, 100000));
  app.add_option("--chunk-items", chunk_items, "items per request (0 = auto)");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<Backend> backend = make_backend(model, threads);
  server::EvaluationServer server(*backend, server::ServeOptions{});
  const int port = server.bind();
  std::thread serving([&] { server.serve(); });
  while (!server.serving()) std::this_thread::yield();

  int rc = 0;
  try {
    server::ServerBackendOptions options;
    options.endpoints = {"http://127.0.0.1:" + std::to_string(port)};
    options.chunk_items = chunk_items;
    server::ServerBackend client(options);

    const auto batch = make_batch(items, pairs);
    Intervention iv;
    iv.rope_scale = {{1.5}};
    time_ms(client, iv, batch);  // warm up connections and caches
    std::vector<double> local, remote;
    for (int r = 0; r < repeats; ++r) {
      local.push_back(time_ms(*backend, iv, batch));
      remote.push_back(time_ms(client, iv, batch));
    }
    const double local_ms = median(local), server_ms = median(remote);
    std::printf("backend: %s; %d items x %d pairs (%zu prompt bytes each), teacher_forced, median of %d\n",
                backend->identity().name.c_str(), items, pairs, batch[0].prompt_text.size(), repeats);
    std::printf("in-process   %10.3f ms per evaluation\n", local_ms);
    std::printf("server path  %10.3f ms per evaluation\n", server_ms);
    std::printf("ratio server/in-process %.2fx; overhead %.3f ms per evaluation, %.4f ms per item\n",
                server_ms / local_ms, server_ms - local_ms, (server_ms - local_ms) / items);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "server_overhead: %s\n", e.what());
    rc = 1;
  }
  server.stop();
  serving.join();
  return rc;
}
