// ga-serve's request validation: every malformed request gets a 4xx with a
// reason naming the field, and never disturbs the requests after it.
#include <future>

#include <gtest/gtest.h>

#include "backends/server/protocol.hpp"
#include "backends/synthetic/synthetic_test_double.hpp"
#include "tests/server/loopback.hpp"

namespace midtune::server {
namespace {

using nlohmann::json;
using testing::LoopbackEvaluationServer;

json good_request() {
  return json::parse(R"({"intervention": {"rope_scale": [[1.5]]}, "mode": "teacher_forced",
    "max_new_tokens": 8,
    "items": [{"id": "a", "prompt": "key 1 -> v1. key 2 -> v2. key 1?", "chunks": [[0, 12], [12, 24]],
               "gold": "v1", "gold_depth": 0.0},
              {"id": "b", "prompt": "key 1 -> v1. key 2 -> v2. key 2?", "chunks": [[0, 12], [12, 24]],
               "gold": "v2", "gold_depth": 1.0}]})");
}

struct BadCase {
  std::string name;
  std::string body;
  int status;
  std::string reason;  // a substring the error message must contain
};

std::string with(const std::function<void(json&)>& edit) {
  json j = good_request();
  edit(j);
  return j.dump();
}

std::vector<BadCase> bad_cases() {
  return {
      {"not_json", "{\"mode\": ", 400, "not JSON"},
      {"not_object", "[1, 2]", 400, "body: must be a JSON object"},
      {"unknown_top_field", with([](json& j) { j["temperature"] = 0.7; }), 400, "temperature: unknown field"},
      {"unknown_item_field", with([](json& j) { j["items"][1]["colour"] = "red"; }), 400,
       "items[1].colour: unknown field"},
      {"missing_field", with([](json& j) { j["items"][0].erase("gold_depth"); }), 400,
       "items[0].gold_depth: missing"},
      {"wrong_type_tokens", with([](json& j) { j["max_new_tokens"] = "8"; }), 400,
       "max_new_tokens: must be an integer"},
      {"tokens_out_of_range", with([](json& j) { j["max_new_tokens"] = 0; }), 400, "max_new_tokens: 0 is outside"},
      {"wrong_type_prompt", with([](json& j) { j["items"][0]["prompt"] = 12; }), 400,
       "items[0].prompt: must be a string"},
      {"bad_mode", with([](json& j) { j["mode"] = "sample"; }), 400, "mode: 'sample' is not one of"},
      {"span_past_end", with([](json& j) { j["items"][0]["chunks"][1] = {12, 900}; }), 400,
       "items[0].chunks[1]: end 900 is past the end of the prompt"},
      {"span_reversed", with([](json& j) { j["items"][0]["chunks"][0] = {9, 3}; }), 400,
       "items[0].chunks[0]: begin 9 is after end 3"},
      {"span_negative", with([](json& j) { j["items"][0]["chunks"][0] = {-1, 3}; }), 400,
       "items[0].chunks[0]: must be a [begin, end] pair"},
      {"span_not_pair", with([](json& j) { j["items"][0]["chunks"][0] = {1, 2, 3}; }), 400,
       "must be a [begin, end] pair"},
      {"duplicate_id", with([](json& j) { j["items"][1]["id"] = "a"; }), 400, "items[1].id: 'a' repeats"},
      {"empty_id", with([](json& j) { j["items"][0]["id"] = ""; }), 400, "items[0].id: must be at least 1 bytes"},
      {"long_id", with([](json& j) { j["items"][0]["id"] = std::string(300, 'x'); }), 400,
       "items[0].id: is 300 bytes, more than the limit of 256"},
      {"empty_gold_teacher_forced", with([](json& j) { j["items"][0]["gold"] = ""; }), 400, "items[0].gold"},
      {"depth_out_of_range", with([](json& j) { j["items"][0]["gold_depth"] = 1.5; }), 400,
       "items[0].gold_depth: must be a finite number in [0"},
      {"no_items", with([](json& j) { j["items"] = json::array(); }), 400, "items: has 0 entries"},
      {"too_many_items",
       with([](json& j) {
         for (int i = 0; i < 3; ++i) {
           j["items"].push_back(j["items"][0]);
           j["items"].back()["id"] = "extra" + std::to_string(i);
         }
       }),
       400, "items: has 5 entries, allowed 1..4"},
      {"intervention_unknown_field", with([](json& j) { j["intervention"]["bogus"] = 1; }), 400,
       "intervention.bogus: unknown field"},
      {"intervention_wrong_type", with([](json& j) { j["intervention"]["rope_scale"] = "1.5"; }), 400,
       "intervention.rope_scale"},
      {"intervention_not_for_model", with([](json& j) { j["intervention"]["rope_scale"] = json::parse("[[1.1], [1.2], [1.3]]"); }),
       422, "rope_scale"},
      {"intervention_unsupported", with([](json& j) { j["intervention"]["siw"] = json::parse(R"({"layers": [0]})"); }), 422,
       "intervention.siw: not supported"},
      {"too_large", std::string(70000, ' ') + good_request().dump(), 413, ""},
  };
}

class RequestValidation : public ::testing::Test {
 protected:
  RequestValidation() : backend_(SyntheticTestDoubleConfig{}), server_(backend_, options()), client_(server_.url()) {
    client_.set_read_timeout(std::chrono::seconds(10));
  }
  static ServeOptions options() {
    ServeOptions o;
    o.limits.max_items = 4;
    o.limits.max_body_bytes = 64 * 1024;
    return o;
  }
  SyntheticTestDoubleBackend backend_;
  testing::LoopbackEvaluationServer server_;
  httplib::Client client_;
};

TEST_F(RequestValidation, EveryBadRequestGets4xxWithReasonAndTheNextGoodOneStillWorks) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    auto res = client_.Post("/v1/evaluate", c.body, "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, c.status) << res->body;
    const json err = json::parse(res->body);  // every error is a protocol error body
    ASSERT_TRUE(err.contains("error"));
    EXPECT_TRUE(err["error"]["code"].is_string());
    EXPECT_NE(err["error"]["message"].get<std::string>().find(c.reason), std::string::npos)
        << err["error"]["message"];

    auto ok = client_.Post("/v1/evaluate", good_request().dump(), "application/json");
    ASSERT_TRUE(ok);
    ASSERT_EQ(ok->status, 200) << ok->body;
  }
}

TEST_F(RequestValidation, GoodRequestAnswersWhatTheBackendAnswersInProcess) {
  const json request = good_request();
  auto res = client_.Post("/v1/evaluate", request.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const EvaluateRequest parsed = evaluate_request_from_json(request, RequestLimits{});
  const auto served = evaluate_reply_from_json(json::parse(res->body), parsed.items);
  SyntheticTestDoubleBackend local{SyntheticTestDoubleConfig{}};
  const auto direct = local.run(parsed.intervention, parsed.items, parsed.options);
  testing::expect_same_outputs(served, direct);
}

TEST_F(RequestValidation, InfoDescribesTheBackendAndOtherRoutesAreErrors) {
  auto info = client_.Get("/v1/info");
  ASSERT_TRUE(info);
  ASSERT_EQ(info->status, 200);
  const ServerInfo parsed = info_from_json(json::parse(info->body));
  EXPECT_EQ(parsed.identity.key(), backend_.identity().key());
  EXPECT_EQ(parsed.protocol_version, kProtocolVersion);
  EXPECT_EQ(parsed.supports, std::vector<std::string>{"rope_scale"});

  auto missing = client_.Get("/v2/info");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["code"], "not_found");
  auto wrong_method = client_.Get("/v1/evaluate");
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405);
  EXPECT_EQ(json::parse(wrong_method->body)["error"]["code"], "method_not_allowed");
}

TEST(EvaluationServerShutdown, FinishesTheEvaluationInFlightAndSends503ToWaitingOnes) {
  SyntheticTestDoubleConfig slow;
  slow.latency_ms = 800;
  SyntheticTestDoubleBackend backend(slow);
  EvaluationServer server(backend, ServeOptions{});
  const int port = server.bind();
  std::thread serving([&] { server.serve(); });
  while (!server.serving()) std::this_thread::yield();

  auto post = [port] {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(std::chrono::seconds(20));
    auto res = client.Post("/v1/evaluate", good_request().dump(), "application/json");
    return res ? std::make_pair(res->status, res->body) : std::make_pair(-1, std::string());
  };
  auto in_flight = std::async(std::launch::async, post);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto waiting = std::async(std::launch::async, post);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  server.stop();
  serving.join();

  const auto [status, body] = in_flight.get();
  EXPECT_EQ(status, 200) << body;
  const auto [late_status, late_body] = waiting.get();
  EXPECT_EQ(late_status, 503) << late_body;
  EXPECT_NE(late_body.find("shutting_down"), std::string::npos) << late_body;
}

}  // namespace
}  // namespace midtune::server
