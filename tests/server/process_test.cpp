// Fan-out across real ga-serve processes on 127.0.0.1: the same answers as
// the in-process backend, a killed server's items finish on the other, and
// SIGTERM answers the request in flight before exiting.
#include <fstream>
#include <future>

#include <gtest/gtest.h>

#include "backends/server/server_backend.hpp"
#include "backends/synthetic/synthetic_test_double.hpp"
#include "tests/server/loopback.hpp"
#include "tests/server/serve_process.hpp"

namespace midtune::server {
namespace {

using testing::ServeProcess;

std::vector<std::string> synthetic_args(double latency_ms = 0.0) {
  return {"--synthetic-test-double", "--synthetic-latency-ms", std::to_string(latency_ms)};
}

ServerBackendOptions options_for(std::vector<std::string> urls, std::size_t chunk_items) {
  ServerBackendOptions o;
  o.endpoints = std::move(urls);
  o.chunk_items = chunk_items;
  o.retry.timeout_s = 10.0;
  o.retry.retries = 2;
  o.retry.backoff_initial_s = 0.02;
  return o;
}

TEST(GaServeProcesses, FanOutAcrossTwoServersEqualsInProcess) {
  ServeProcess a(synthetic_args()), b(synthetic_args());
  ServerBackend backend(options_for({a.url(), b.url()}, 4));
  SyntheticTestDoubleBackend local(SyntheticTestDoubleConfig{});
  ASSERT_EQ(backend.identity().key(), local.identity().key());
  const auto items = testing::make_items(50);
  for (Mode mode : {Mode::teacher_forced, Mode::generate})
    for (double scale : {1.0, 1.25, 1.7}) {
      const RunOptions options{mode, 16};
      testing::expect_same_outputs(backend.run(testing::lpes_like(scale), items, options),
                                   local.run(testing::lpes_like(scale), items, options));
    }
}

TEST(GaServeProcesses, KillingOneServerMidBatchFinishesOnTheOther) {
  // 30 chunks of 40 ms each: the batch takes about 0.6 s on two servers, so
  // the kill at 0.2 s lands while both are working.
  ServeProcess doomed(synthetic_args(40)), survivor(synthetic_args(40));
  ServerBackend backend(options_for({doomed.url(), survivor.url()}, 2));
  const auto items = testing::make_items(60);
  auto running = std::async(std::launch::async, [&] {
    return backend.run(testing::lpes_like(1.5), items, RunOptions{});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  doomed.signal(SIGKILL);
  const auto outputs = running.get();

  SyntheticTestDoubleBackend local(SyntheticTestDoubleConfig{});
  testing::expect_same_outputs(outputs, local.run(testing::lpes_like(1.5), items, RunOptions{}));
  const auto status = backend.status();
  EXPECT_FALSE(status[0].last_error.empty()) << "the kill landed after the batch; nothing was tested";
  EXPECT_LT(status[0].items_last_run, items.size());
  EXPECT_EQ(status[0].items_last_run + status[1].items_last_run, items.size());

  // The next evaluation skips the dead endpoint and still completes.
  testing::expect_same_outputs(backend.run(testing::lpes_like(1.2), items, RunOptions{}),
                               local.run(testing::lpes_like(1.2), items, RunOptions{}));
  EXPECT_EQ(backend.status()[1].items_last_run, items.size());
}

TEST(GaServeProcesses, SigtermAnswersTheRequestInFlightThenExits) {
  ServeProcess server(synthetic_args(1500));
  ServerBackend backend(options_for({server.url()}, 16));
  const auto items = testing::make_items(8);
  auto running = std::async(std::launch::async, [&] {
    return backend.run(testing::lpes_like(1.5), items, RunOptions{});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the request is in flight (1.5 s)
  server.signal(SIGTERM);
  const auto outputs = running.get();  // answered, not cut off
  SyntheticTestDoubleBackend local(SyntheticTestDoubleConfig{});
  testing::expect_same_outputs(outputs, local.run(testing::lpes_like(1.5), items, RunOptions{}));
  EXPECT_EQ(server.wait_exit(std::chrono::seconds(10)), 0);
}

TEST(GaServeProcesses, BadRequestsDuringAnEvaluationDoNotDisturbIt) {
  ServeProcess server(synthetic_args(300));
  ServerBackend backend(options_for({server.url()}, 16));
  const auto items = testing::make_items(4);
  auto running = std::async(std::launch::async, [&] {
    return backend.run(testing::lpes_like(1.5), items, RunOptions{});
  });
  httplib::Client raw(server.url());
  for (const std::string& body : std::vector<std::string>{"{", "[]", "{\"mode\": 3}", std::string(1000, '[')}) {
    auto res = raw.Post("/v1/evaluate", body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
  }
  SyntheticTestDoubleBackend local(SyntheticTestDoubleConfig{});
  testing::expect_same_outputs(running.get(), local.run(testing::lpes_like(1.5), items, RunOptions{}));
}

using testing::run_to_exit;

TEST(GaServeProcesses, CommandLineMistakesAreClearErrors) {
  auto [code, err] = run_to_exit("--model /nonexistent/model.gguf --port 0");
  EXPECT_NE(code, 0);
  EXPECT_NE(err.find("/nonexistent/model.gguf"), std::string::npos) << err;

  ServeProcess taken(synthetic_args());
  const std::string port = taken.url().substr(taken.url().rfind(':') + 1);
  std::tie(code, err) = run_to_exit("--synthetic-test-double --port " + port);
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("cannot listen on 127.0.0.1:" + port), std::string::npos) << err;

  std::tie(code, err) = run_to_exit("--port 0");
  EXPECT_NE(code, 0);
  EXPECT_NE(err.find("--model"), std::string::npos) << err;
}

}  // namespace
}  // namespace midtune::server
