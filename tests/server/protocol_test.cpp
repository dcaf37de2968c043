// The protocol codec: what the client sends the server reads back exactly,
// and a reply that breaks PROTOCOL.md is refused with the field named.
#include <gtest/gtest.h>

#include "backends/server/protocol.hpp"
#include "tests/server/loopback.hpp"

namespace midtune::server {
namespace {

using nlohmann::json;

TEST(Protocol, RequestRoundTripsExactly) {
  Intervention iv;
  iv.rope_scale = {{1.25}, {1.5}};
  iv.mspoe = MsPoe{};
  iv.siw = Siw{.alpha_dense = 0.5, .alpha_sparse = 1.5, .sigma = 2.0, .layers = {0, 3}};
  RunOptions options{Mode::generate, 17};
  const auto items = testing::make_items(3);
  const json wire = json::parse(evaluate_request_to_json(iv, options, items).dump());
  const EvaluateRequest back = evaluate_request_from_json(wire, RequestLimits{});
  EXPECT_EQ(back.intervention, iv);
  EXPECT_EQ(back.options.mode, Mode::generate);
  EXPECT_EQ(back.options.max_new_tokens, 17);
  ASSERT_EQ(back.items.size(), items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(back.items[i].id, items[i].id);
    EXPECT_EQ(back.items[i].prompt_text, items[i].prompt_text);
    EXPECT_EQ(back.items[i].chunks, items[i].chunks);
    EXPECT_EQ(back.items[i].gold, items[i].gold);
    EXPECT_EQ(back.items[i].gold_depth, items[i].gold_depth);
  }
}

std::vector<SampleOutput> outputs_for(const std::vector<BatchItem>& items) {
  std::vector<SampleOutput> out;
  for (std::size_t i = 0; i < items.size(); ++i)
    out.push_back({items[i].id, "text " + std::to_string(i), i % 2 == 0, -0.1 * static_cast<double>(i) - 1e-17,
                   static_cast<int>(10 + i), 1.5});
  return out;
}

TEST(Protocol, ReplyRoundTripsBitExactly) {
  const auto items = testing::make_items(4);
  const auto out = outputs_for(items);
  const auto back = evaluate_reply_from_json(json::parse(dump_for_wire(evaluate_reply_to_json(out))), items);
  testing::expect_same_outputs(back, out);  // doubles survive: shortest round-trip printing
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(back[i].wall_ms, out[i].wall_ms);
}

void expect_refused(const json& reply, const std::vector<BatchItem>& items, const std::string& reason) {
  try {
    evaluate_reply_from_json(reply, items);
    ADD_FAILURE() << "accepted a bad reply; expected: " << reason;
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(Protocol, MalformedRepliesAreRefusedNamingTheField) {
  const auto items = testing::make_items(3);
  const json good = evaluate_reply_to_json(outputs_for(items));
  auto edited = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    return j;
  };
  expect_refused(json::array(), items, "reply: must be a JSON object");
  expect_refused(edited([](json& j) { j["items"].erase(2); }), items, "reply.items: has 2 entries, allowed 3..3");
  expect_refused(edited([](json& j) { std::swap(j["items"][0], j["items"][1]); }), items,
                 "reply.items[0].id: 'item-1' does not match the request's id 'item-0'");
  expect_refused(edited([](json& j) { j["items"][1]["gold_logprob"] = "-1"; }), items,
                 "reply.items[1].gold_logprob: must be a number");
  expect_refused(edited([](json& j) { j["items"][1]["gold_logprob"] = nullptr; }), items,
                 "reply.items[1].gold_logprob: must be a number");
  expect_refused(edited([](json& j) { j["items"][2]["gold_emitted_first"] = 1; }), items,
                 "reply.items[2].gold_emitted_first: must be true or false");
  expect_refused(edited([](json& j) { j["items"][0]["prompt_tokens"] = -3; }), items,
                 "reply.items[0].prompt_tokens: -3 is outside");
  expect_refused(edited([](json& j) { j["items"][0].erase("output"); }), items, "reply.items[0].output: missing");
  expect_refused(edited([](json& j) { j["items"][0]["score"] = 1.0; }), items, "reply.items[0].score: unknown field");
  expect_refused(edited([](json& j) { j["accuracy"] = 1.0; }), items, "reply.accuracy: unknown field");
}

TEST(Protocol, InfoRoundTripsAndRejectsUnknownSupports) {
  ServerInfo info;
  info.identity = {"m", "llama", 30, 9, 3, 576, "abc", "", ""};
  info.supports = {"rope_scale", "siw"};
  const ServerInfo back = info_from_json(json::parse(info_to_json(info).dump()));
  EXPECT_EQ(back.identity.key(), info.identity.key());
  EXPECT_EQ(back.supports, info.supports);
  EXPECT_FALSE(back.user_prompt);
  info.user_prompt = PromptTemplate{"<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"};
  EXPECT_EQ(info_from_json(json::parse(info_to_json(info).dump())).user_prompt, info.user_prompt);
  json bad = info_to_json(info);
  bad["supports"].push_back("temperature");
  EXPECT_THROW(info_from_json(bad), ProtocolError);
  bad = info_to_json(info);
  bad["layers"] = 0;
  EXPECT_THROW(info_from_json(bad), ProtocolError);
}

// A GPU engine's server says it computes in bf16; the field is part of the
// identity (cache keys), absent for the CPU engine, and checked when present.
TEST(Protocol, PrecisionIsPartOfTheIdentityWhenAServerSendsIt) {
  ServerInfo info;
  info.identity = {"m", "llama", 30, 9, 3, 576, "abc", "", ""};
  EXPECT_FALSE(info_to_json(info).contains("precision"));
  const std::string cpu_key = info.identity.key();
  info.identity.precision = "bf16";
  const ServerInfo back = info_from_json(json::parse(info_to_json(info).dump()));
  EXPECT_EQ(back.identity.precision, "bf16");
  EXPECT_EQ(back.identity.key(), info.identity.key());
  EXPECT_NE(back.identity.key(), cpu_key);
  json bad = info_to_json(info);
  bad["precision"] = "";
  EXPECT_THROW(info_from_json(bad), ProtocolError);
}

TEST(Protocol, InvalidUtf8OutputIsReplacedNotFatal) {
  const auto items = testing::make_items(1);
  auto out = outputs_for(items);
  out[0].output_text = "caf\xc3";  // a two-byte character cut in half
  const auto back = evaluate_reply_from_json(json::parse(dump_for_wire(evaluate_reply_to_json(out))), items);
  EXPECT_EQ(back[0].output_text, "caf\xef\xbf\xbd");
}

TEST(Protocol, ErrorBodiesAreDescribed) {
  EXPECT_EQ(describe_error_body(error_body("invalid_field", "items[0].id: missing").dump()),
            "invalid_field: items[0].id: missing");
  EXPECT_NE(describe_error_body("<html>Bad Gateway</html>").find("not a protocol error body"), std::string::npos);
}

}  // namespace
}  // namespace midtune::server
