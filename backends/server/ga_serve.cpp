// ga-serve: serves a midtune backend over PROTOCOL.md.
//   ga-serve --model PATH --port N [--threads T] [--host 127.0.0.1] [--token-file PATH]
//            [--request-deadline-s S] [--max-connections N] [--max-connections-per-peer N]
//   ga-serve --model PATH --device cuda [--gpu N] [--batch-tokens N] ...   (the batched engine on a GPU)
//   ga-serve --synthetic-test-double --port 0      (tests and benchmarks only)
// Prints "ga-serve: listening on http://HOST:PORT" once it accepts requests
// (with --port 0 the port is chosen by the system). SIGTERM / SIGINT stop it
// after the evaluation in flight has been answered.
#include <csignal>
#include <iostream>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>

#include "backends/engine/engine_factory.hpp"
#include "backends/engine/gguf/chat_template.hpp"
#include "backends/server/endpoint_client.hpp"
#include "backends/server/evaluation_server.hpp"
#include "backends/synthetic/synthetic_test_double.hpp"

namespace {

struct Args {
  std::string model;
  std::string host = "127.0.0.1";
  std::string token_file;
  int port = 8080;
  int threads = 0;
  std::string device = "cpu";
  int gpu = 0;
  std::size_t batch_tokens = 0;
  std::string precision = "native";
  std::string kv_cache = "fp32";
  std::string attention;  // empty: the device's default
  std::size_t max_items = 1024;
  double request_deadline_s = 30.0;
  int max_connections = 256;
  int max_connections_per_peer = 32;
  bool synthetic = false;
  int synthetic_layers = 30;
  int synthetic_heads = 9;
  double synthetic_noise = 0.05;
  double synthetic_latency_ms = 0.0;
  std::uint64_t synthetic_seed = 0;
};

std::unique_ptr<midtune::Backend> make_backend(const Args& args) {
  if (args.synthetic) {
    midtune::SyntheticTestDoubleConfig config;
    config.layers = args.synthetic_layers;
    config.heads = args.synthetic_heads;
    config.noise = args.synthetic_noise;
    config.latency_ms = args.synthetic_latency_ms;
    config.seed = args.synthetic_seed;
    return std::make_unique<midtune::SyntheticTestDoubleBackend>(config);
  }
  midtune::engine::EngineDeviceOptions options;
  options.device = args.device;
  options.threads = args.threads;
  options.gpu = args.gpu;
  options.batch_tokens = args.batch_tokens;
  options.precision = args.precision;
  options.kv_cache = args.kv_cache;
  options.attention = args.attention;
  return midtune::engine::make_engine_backend(args.model, options);
}

// "http://HOST:PORT", an IPv6 address in brackets (RFC 3986).
std::string url_of(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// The engine's chat template for one user message, as prefix + content + suffix
// (render_user never trims the content).
std::optional<midtune::server::PromptTemplate> user_prompt_of(const midtune::Backend& backend) {
  const midtune::GgufFile* file = midtune::engine::engine_model_file(backend);
  if (file == nullptr) return std::nullopt;
  const auto rendered = midtune::ChatTemplate::from_gguf(*file).render_user("");
  return midtune::server::PromptTemplate{rendered.text.substr(0, rendered.content_begin),
                                         rendered.text.substr(rendered.content_end)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ga-serve: serve a midtune model over the evaluation protocol (backends/server/PROTOCOL.md)"};
  Args args;
  auto* model = app.add_option("--model", args.model, "GGUF model file to serve")->check(CLI::ExistingFile);
  app.add_option("--port", args.port, "TCP port; 0 = any free port (printed at start)")->check(CLI::Range(0, 65535));
  app.add_option("--host", args.host,
                 "address to listen on (default loopback only; any other address needs --token-file)");
  app.add_option("--token-file", args.token_file,
                 "file holding a bearer token every request must carry (clients: MIDTUNE_SERVER_TOKEN)")
      ->check(CLI::ExistingFile);
  app.add_option("--threads", args.threads, "engine threads; 0 = all cores")->check(CLI::NonNegativeNumber);
  app.add_option("--device", args.device, "cpu | cuda (the batched engine on a GPU)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--gpu", args.gpu, "device cuda: which GPU (ga-run devices)")->check(CLI::NonNegativeNumber);
  app.add_option("--precision", args.precision,
                 "native | fp32 (device cpu: fp32 matrices) | file (device cuda: weights kept in their blocks; "
                 "a 70B Q4_K_M fits one 80 GB GPU)")
      ->check(CLI::IsMember({"native", "fp32", "file"}));
  app.add_option("--kv-cache", args.kv_cache,
                 "fp32 | bf16 (keys and values stored in bf16: half the cache memory; results keyed apart)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--attention", args.attention,
                 "device cuda: the prefill attention body, flash | gemm (default flash, or MIDTUNE_CUDA_ATTENTION; "
                 "results keyed apart)")
      ->check(CLI::IsMember({"flash", "gemm"}));
  app.add_option("--batch-tokens", args.batch_tokens, "device cuda: tokens per pass, 0 = from the free GPU memory");
  app.add_option("--max-items", args.max_items, "most items accepted in one request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--request-deadline-s", args.request_deadline_s,
                 "seconds from a request's first byte to its last (line, headers, body); later: closed with 408")
      ->check(CLI::Range(0.001, 86400.0));
  // Below the 1024 descriptors select() takes: httplib refuses a connection on a higher one.
  app.add_option("--max-connections", args.max_connections,
                 "connections held at once; past it the oldest one still sending its request is closed")
      ->check(CLI::Range(1, 900));
  app.add_option("--max-connections-per-peer", args.max_connections_per_peer,
                 "connections held at once from one address; past it that address's oldest one still "
                 "sending its request is closed")
      ->check(CLI::Range(1, 900));
  auto* synthetic = app.add_flag("--synthetic-test-double", args.synthetic,
                                 "TEST OPTION: serve the synthetic test double instead of a model");
  app.add_option("--synthetic-layers", args.synthetic_layers, "test double: layers")->needs(synthetic);
  app.add_option("--synthetic-heads", args.synthetic_heads, "test double: heads")->needs(synthetic);
  app.add_option("--synthetic-noise", args.synthetic_noise, "test double: noise")->needs(synthetic);
  app.add_option("--synthetic-seed", args.synthetic_seed, "test double: noise seed (ga-run uses the experiment seed)")
      ->needs(synthetic);
  app.add_option("--synthetic-latency-ms", args.synthetic_latency_ms, "test double: sleep per evaluation")
      ->needs(synthetic);
  model->excludes(synthetic);
  CLI11_PARSE(app, argc, argv);
  if (!args.synthetic && args.model.empty()) {
    std::cerr << "ga-serve: give --model PATH (or --synthetic-test-double for tests)\n";
    return 2;
  }

  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    midtune::server::ServeOptions options;
    if (!args.token_file.empty()) options.token = midtune::server::read_token_file(args.token_file);
    // Refuse an open, unauthenticated address before spending time on the model.
    if (!midtune::server::is_loopback_host(args.host) && options.token.empty())
      throw std::runtime_error("refusing to listen on " + args.host +
                               " without --token-file: anyone who can reach it could run the model");
    if (const std::string problem = midtune::server::public_token_problem(options.token);
        !midtune::server::is_loopback_host(args.host) && !problem.empty())
      throw std::runtime_error("refusing to listen on " + args.host + ": the token in --token-file " +
                               args.token_file + " " + problem);
    std::unique_ptr<midtune::Backend> backend = make_backend(args);
    options.host = args.host;
    options.port = args.port;
    options.limits.max_items = args.max_items;
    options.request_deadline_s = args.request_deadline_s;
    options.max_connections = args.max_connections;
    options.max_connections_per_peer = args.max_connections_per_peer;
    options.user_prompt = user_prompt_of(*backend);
    midtune::server::EvaluationServer server(*backend, options);
    const int port = server.bind();

    std::atomic<bool> served{false};
    std::thread signal_waiter([&] {
      int signal = 0;
      sigwait(&stop_signals, &signal);
      if (served) return;  // woken by main below, not by a user
      std::cerr << "ga-serve: signal " << signal << ", finishing the request in flight\n";
      // Repeat until serve() returns: a stop before listening starts is otherwise lost.
      while (!served) {
        server.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    std::cout << "ga-serve: listening on " << url_of(args.host, port) << std::endl;
    server.serve();
    served = true;
    pthread_kill(signal_waiter.native_handle(), SIGTERM);  // release the waiter if no signal came
    signal_waiter.join();
    std::cerr << "ga-serve: stopped\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ga-serve: " << e.what() << "\n";
    return 1;
  }
}
