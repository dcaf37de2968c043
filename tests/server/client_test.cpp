// ServerBackend against fake servers that misbehave on purpose (all on
// 127.0.0.1, in-process): every failure ends in BackendError after bounded
// retries and nothing is scored; fan-out gives the in-process answers.
#include <atomic>
#include <condition_variable>

#include <gtest/gtest.h>

#include "backends/server/server_backend.hpp"
#include "backends/synthetic/synthetic_test_double.hpp"
#include "tests/server/loopback.hpp"

namespace midtune::server {
namespace {

using nlohmann::json;
using testing::LoopbackEvaluationServer;
using testing::LoopbackHttp;

SyntheticTestDoubleConfig synthetic_config() { return SyntheticTestDoubleConfig{}; }

std::string synthetic_info() {
  ServerInfo info;
  info.identity = SyntheticTestDoubleBackend(synthetic_config()).identity();
  info.supports = {"rope_scale"};
  return info_to_json(info).dump();
}

RetryPolicy fast_policy(int retries = 2, double timeout_s = 5.0) {
  RetryPolicy p;
  p.timeout_s = timeout_s;
  p.retries = retries;
  p.backoff_initial_s = 0.01;
  p.backoff_max_s = 0.05;
  return p;
}

ServerBackendOptions options_for(std::vector<std::string> urls, RetryPolicy policy = fast_policy()) {
  ServerBackendOptions o;
  o.endpoints = std::move(urls);
  o.retry = policy;
  return o;
}

// A fake that answers /v1/info like the test double and /v1/evaluate with
// `evaluate`, counting evaluate attempts.
struct FakeServer {
  explicit FakeServer(std::function<void(const httplib::Request&, httplib::Response&)> evaluate) {
    http.server().Get("/v1/info", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(synthetic_info(), "application/json");
    });
    http.server().Post("/v1/evaluate", [this, evaluate](const httplib::Request& req, httplib::Response& res) {
      ++attempts;
      evaluate(req, res);
    });
    http.start();
  }
  LoopbackHttp http;
  std::atomic<int> attempts{0};
};

std::string run_error(ServerBackend& backend, std::size_t items = 6) {
  try {
    const auto out = backend.run(testing::lpes_like(1.5), testing::make_items(items), RunOptions{});
    ADD_FAILURE() << "a failed evaluation returned " << out.size() << " scored outputs";
  } catch (const BackendError& e) {
    return e.what();
  }
  return "";
}

TEST(ServerClient, Http500IsRetriedThenFails) {
  FakeServer fake([](const httplib::Request&, httplib::Response& res) {
    res.status = 500;
    res.set_content(error_body("backend_error", "out of memory").dump(), "application/json");
  });
  ServerBackend backend(options_for({fake.http.url()}, fast_policy(2)));
  const std::string error = run_error(backend, 3);
  EXPECT_EQ(fake.attempts, 3);  // first chunk: first try + 2 retries; then the endpoint is down
  EXPECT_NE(error.find(fake.http.url()), std::string::npos) << error;
  EXPECT_NE(error.find("HTTP 500: backend_error: out of memory"), std::string::npos) << error;
}

TEST(ServerClient, MalformedJsonIsRetriedThenFails) {
  FakeServer fake([](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"items\": [", "application/json");
  });
  ServerBackend backend(options_for({fake.http.url()}, fast_policy(1)));
  const std::string error = run_error(backend, 2);
  EXPECT_EQ(fake.attempts, 2);
  EXPECT_NE(error.find("malformed reply, not JSON"), std::string::npos) << error;
}

TEST(ServerClient, WrongIdsAreAFailureNamingTheField) {
  FakeServer fake([](const httplib::Request& req, httplib::Response& res) {
    json reply = json::object({{"items", json::array()}});
    const json request = json::parse(req.body);
    for (const json& item : request["items"])
      reply["items"].push_back({{"id", item["id"].get<std::string>() + "-x"}, {"output", ""},
                                {"gold_emitted_first", true}, {"gold_logprob", 0.0}, {"prompt_tokens", 1},
                                {"wall_ms", 0.0}});
    res.set_content(reply.dump(), "application/json");
  });
  ServerBackend backend(options_for({fake.http.url()}, fast_policy(1)));
  const std::string error = run_error(backend, 2);
  EXPECT_EQ(fake.attempts, 2);
  EXPECT_NE(error.find("reply.items[0].id: 'item-0-x' does not match the request's id 'item-0'"), std::string::npos)
      << error;
}

TEST(ServerClient, HangingPastTheTimeoutFails) {
  std::mutex m;
  std::condition_variable released;
  bool release = false;
  FakeServer fake([&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock lock(m);
    released.wait_for(lock, std::chrono::seconds(20), [&] { return release; });
    res.status = 500;
  });
  ServerBackend backend(options_for({fake.http.url()}, fast_policy(1, 0.2)));
  const std::string error = run_error(backend, 2);
  EXPECT_EQ(fake.attempts, 2);
  EXPECT_NE(error.find("no reply"), std::string::npos) << error;
  {
    std::lock_guard lock(m);
    release = true;
  }
  released.notify_all();
}

TEST(ServerClient, A4xxIsNotRetried) {
  FakeServer fake([](const httplib::Request&, httplib::Response& res) {
    res.status = 400;
    res.set_content(error_body("invalid_field", "items[0].gold: missing").dump(), "application/json");
  });
  ServerBackend backend(options_for({fake.http.url()}, fast_policy(3)));
  const std::string error = run_error(backend, 2);
  EXPECT_EQ(fake.attempts, 1);
  EXPECT_NE(error.find("HTTP 400: invalid_field: items[0].gold: missing"), std::string::npos) << error;
}

TEST(ServerClient, ATransientFailureThenSuccessIsRetriedToTheRightAnswer) {
  SyntheticTestDoubleBackend reference(synthetic_config());
  FakeServer fake([&](const httplib::Request& req, httplib::Response& res) {
    static std::atomic<int> calls{0};
    if (calls++ < 2) {
      res.status = 503;
      return;
    }
    const EvaluateRequest r = evaluate_request_from_json(json::parse(req.body), RequestLimits{});
    res.set_content(evaluate_reply_to_json(reference.run(r.intervention, r.items, r.options)).dump(),
                    "application/json");
  });
  ServerBackend backend(options_for({fake.http.url()}, fast_policy(2)));
  const auto items = testing::make_items(3);
  testing::expect_same_outputs(backend.run(testing::lpes_like(1.4), items, RunOptions{}),
              reference.run(testing::lpes_like(1.4), items, RunOptions{}));
  EXPECT_EQ(fake.attempts, 5);  // two 503s, then one request per one-item chunk
}

TEST(ServerClient, RefusesAnotherProtocolVersionOrModel) {
  LoopbackHttp v2;
  v2.server().Get("/v1/info", [](const httplib::Request&, httplib::Response& res) {
    json info = json::parse(synthetic_info());
    info["protocol_version"] = 2;
    info["new_field"] = true;
    res.set_content(info.dump(), "application/json");
  });
  v2.start();
  try {
    ServerBackend backend(options_for({v2.url()}));
    ADD_FAILURE() << "accepted a protocol 2 server";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("protocol version 2"), std::string::npos) << e.what();
  }

  SyntheticTestDoubleBackend served(synthetic_config());
  LoopbackEvaluationServer server(served);
  auto expecting_other = options_for({server.url()});
  expecting_other.expected_identity = served.identity();
  expecting_other.expected_identity->layers = 24;
  EXPECT_THROW(ServerBackend{expecting_other}, BackendError);

  SyntheticTestDoubleConfig other_config;
  other_config.seed = 7;
  SyntheticTestDoubleBackend other(other_config);
  LoopbackEvaluationServer other_server(other);
  try {
    ServerBackend backend(options_for({server.url(), other_server.url()}));
    ADD_FAILURE() << "mixed two models";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("must not mix"), std::string::npos) << e.what();
  }
}

// ga-serve killed between two batches of one search and started again on
// the same port with another model file: the client's next request is
// answered by the other model (its HTTP library reconnects without a
// visible failure). The reply's model header gives it away; the batch
// fails naming both models and nothing of the other model is returned.
TEST(ServerClient, AModelSwappedBehindTheAddressFailsTheBatch) {
  SyntheticTestDoubleConfig other_config;
  other_config.seed = 7;  // another model: another identity, other answers
  SyntheticTestDoubleBackend first(synthetic_config()), second(other_config);
  ASSERT_NE(first.identity().key(), second.identity().key());
  auto server = std::make_unique<LoopbackEvaluationServer>(first);
  const int port = server->port();
  ServerBackend backend(options_for({server->url()}));
  const auto items = testing::make_items(4);
  testing::expect_same_outputs(backend.run(testing::lpes_like(1.2), items, RunOptions{}),
                               first.run(testing::lpes_like(1.2), items, RunOptions{}));

  server.reset();
  ServeOptions same_port;
  same_port.port = port;
  server = std::make_unique<LoopbackEvaluationServer>(second, same_port);
  const std::string error = run_error(backend, 4);
  EXPECT_NE(error.find("now answers for"), std::string::npos) << error;
  EXPECT_NE(error.find(second.identity().key()), std::string::npos) << error;
  EXPECT_NE(error.find(first.identity().key()), std::string::npos) << error;
  EXPECT_NE(error.find("Nothing it answered is stored"), std::string::npos) << error;
  EXPECT_FALSE(backend.status()[0].refusal.empty()) << "the endpoint is not used again";
  EXPECT_NE(run_error(backend, 4).find("refused"), std::string::npos);
}

// A server of an older midtune sends no model header: the client reads
// /v1/info again after each reply, so the swap is caught all the same.
TEST(ServerClient, AModelSwappedBehindAServerWithoutTheHeaderFailsTheBatch) {
  SyntheticTestDoubleConfig other_config;
  other_config.seed = 7;
  SyntheticTestDoubleBackend first(synthetic_config()), second(other_config);
  std::atomic<SyntheticTestDoubleBackend*> serving{&first};
  std::atomic<int> info_requests{0};
  LoopbackHttp old;
  old.server().Get("/v1/info", [&](const httplib::Request&, httplib::Response& res) {
    ++info_requests;
    ServerInfo info;
    info.identity = serving.load()->identity();
    info.supports = {"rope_scale"};
    res.set_content(info_to_json(info).dump(), "application/json");
  });
  old.server().Post("/v1/evaluate", [&](const httplib::Request& req, httplib::Response& res) {
    const EvaluateRequest r = evaluate_request_from_json(json::parse(req.body), RequestLimits{});
    res.set_content(evaluate_reply_to_json(serving.load()->run(r.intervention, r.items, r.options)).dump(),
                    "application/json");
  });
  old.start();
  auto opts = options_for({old.url()});
  opts.chunk_items = 2;
  ServerBackend backend(opts);
  const auto items = testing::make_items(4);
  const int before = info_requests;
  testing::expect_same_outputs(backend.run(testing::lpes_like(1.2), items, RunOptions{}),
                               first.run(testing::lpes_like(1.2), items, RunOptions{}));
  EXPECT_EQ(info_requests - before, 2) << "/v1/info read again after each of the two replies";
  serving = &second;
  const std::string error = run_error(backend, 4);
  EXPECT_NE(error.find("now answers for"), std::string::npos) << error;
  EXPECT_NE(error.find(second.identity().key()), std::string::npos) << error;
}

TEST(ServerClient, NoEndpointAnsweringIsAnError) {
  LoopbackHttp closed;
  closed.start();
  const std::string url = closed.url();
  closed.stop();
  EXPECT_THROW(ServerBackend{options_for({url}, fast_policy(1))}, BackendError);
}

TEST(ServerClient, FanOutOverTwoServersEqualsInProcess) {
  SyntheticTestDoubleBackend a(synthetic_config()), b(synthetic_config()), local(synthetic_config());
  LoopbackEvaluationServer server_a(a), server_b(b);
  auto opts = options_for({server_a.url(), server_b.url()});
  opts.chunk_items = 3;
  ServerBackend backend(opts);
  EXPECT_EQ(backend.identity().key(), local.identity().key());
  const auto items = testing::make_items(40);
  for (double scale : {1.0, 1.3, 1.8}) {
    testing::expect_same_outputs(backend.run(testing::lpes_like(scale), items, RunOptions{}),
                local.run(testing::lpes_like(scale), items, RunOptions{}));
  }
  std::size_t total = 0;
  for (const auto& s : backend.status()) total += s.items_last_run;
  EXPECT_EQ(total, items.size());
}

TEST(ServerClient, ItemsOfABrokenOrDeadEndpointGoToTheOthers) {
  // The good server takes 30 ms per request, so the broken one surely gets
  // chunks while the good one works (latency does not change the answers).
  SyntheticTestDoubleConfig slow = synthetic_config();
  slow.latency_ms = 30;
  SyntheticTestDoubleBackend good(slow), local(synthetic_config());
  LoopbackEvaluationServer server(good);
  FakeServer broken([](const httplib::Request&, httplib::Response& res) { res.status = 500; });
  LoopbackHttp dead;
  dead.start();
  const std::string dead_url = dead.url();
  dead.stop();

  auto opts = options_for({broken.http.url(), dead_url, server.url()}, fast_policy(1));
  opts.chunk_items = 2;
  ServerBackend backend(opts);  // the dead endpoint only warns: another one answered
  const auto items = testing::make_items(20);
  testing::expect_same_outputs(backend.run(testing::lpes_like(1.6), items, RunOptions{}),
              local.run(testing::lpes_like(1.6), items, RunOptions{}));
  const auto status = backend.status();
  EXPECT_EQ(status[0].items_last_run, 0u);
  EXPECT_GT(broken.attempts, 0);
  EXPECT_NE(status[0].last_error.find("HTTP 500"), std::string::npos) << status[0].last_error;
  EXPECT_EQ(status[1].items_last_run, 0u);
  EXPECT_EQ(status[2].items_last_run, items.size());
}

TEST(ServerClient, ThePromptTemplateComesFromTheServerAndMustAgree) {
  SyntheticTestDoubleBackend a(synthetic_config()), b(synthetic_config());
  ServeOptions chatml;
  chatml.user_prompt = PromptTemplate{"<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"};
  LoopbackEvaluationServer templated(a, chatml), plain(b);
  EXPECT_EQ(ServerBackend(options_for({templated.url()})).user_prompt(), chatml.user_prompt);
  EXPECT_FALSE(ServerBackend(options_for({plain.url()})).user_prompt());
  try {
    ServerBackend mixed(options_for({templated.url(), plain.url()}));
    ADD_FAILURE() << "mixed two chat templates";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("another chat template"), std::string::npos) << e.what();
  }
}

TEST(ServerClient, ValidateChecksSupportAndShapeAgainstTheServedModel) {
  SyntheticTestDoubleBackend served(synthetic_config());
  LoopbackEvaluationServer server(served);
  ServerBackend backend(options_for({server.url()}));
  EXPECT_NO_THROW(backend.validate(testing::lpes_like(1.5)));
  Intervention rows;
  rows.rope_scale = {{1.0}, {1.1}};
  EXPECT_THROW(backend.validate(rows), std::invalid_argument);
  Intervention siw;
  siw.siw = Siw{};
  EXPECT_THROW(backend.validate(siw), std::invalid_argument);
  // A 422 from the server (the model cannot apply it) is a BackendError, not retried.
  EXPECT_THROW(backend.run(rows, testing::make_items(2), RunOptions{}), BackendError);
}

}  // namespace
}  // namespace midtune::server
