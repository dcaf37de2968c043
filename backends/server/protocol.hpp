// The evaluation protocol (PROTOCOL.md, version 1): encoding and strict
// decoding of every message, shared by the client (ServerBackend) and the
// server (EvaluationServer) so the two cannot drift apart.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "backends/server/json_reader.hpp"

namespace midtune::server {

inline constexpr int kProtocolVersion = 1;

// The Intervention fields a server may implement (`supports` in /v1/info).
const std::vector<std::string>& all_intervention_fields();
// The fields an Intervention sets, in all_intervention_fields() order.
std::vector<std::string> intervention_fields_used(const Intervention& intervention);

// How the served model wants a single user message wrapped (its chat
// template): prompt = prefix + message + suffix, the message byte for byte.
struct PromptTemplate {
  std::string prefix;
  std::string suffix;
  bool operator==(const PromptTemplate&) const = default;
};

struct ServerInfo {
  ModelIdentity identity;
  std::optional<PromptTemplate> user_prompt;  // nullopt: prompts go as written
  int protocol_version = kProtocolVersion;
  std::vector<std::string> supports = all_intervention_fields();
};

// Every reply of a server carries its model's identity digest in this
// header, so a client notices when the process behind an address changed
// (restarted on another model file) between two requests of one search,
// even when its HTTP library reconnected without a visible failure.
inline constexpr const char* kModelHeader = "Midtune-Model";
// "xxh3-128:<32 hex digits>" of identity.key(): the whole identity that
// results are stored under, in a short ASCII header value.
std::string model_digest(const ModelIdentity& identity);

nlohmann::json info_to_json(const ServerInfo& info);
ServerInfo info_from_json(const nlohmann::json& j);  // throws ProtocolError

// Server-side limits on a request (PROTOCOL.md table).
struct RequestLimits {
  std::size_t max_body_bytes = 64u << 20;
  std::size_t max_items = 1024;
  std::size_t max_id_bytes = 256;
  std::size_t max_prompt_bytes = 4u << 20;
  std::size_t max_chunks = 100000;
  std::size_t max_gold_bytes = 64u << 10;
  int max_new_tokens = 4096;
};

struct EvaluateRequest {
  Intervention intervention;
  RunOptions options;
  std::vector<BatchItem> items;
};

nlohmann::json evaluate_request_to_json(const Intervention& intervention, const RunOptions& options,
                                        std::span<const BatchItem> items);
// Throws ProtocolError naming the field; an Intervention that does not parse
// is reported under "intervention.<field>", InvalidValueError when it parses
// but holds a number no model can compute with.
EvaluateRequest evaluate_request_from_json(const nlohmann::json& j, const RequestLimits& limits);

nlohmann::json evaluate_reply_to_json(const std::vector<SampleOutput>& outputs);
// Checks the reply against the request it answers: one item per request
// item, same ids in the same order, every field of the right type.
std::vector<SampleOutput> evaluate_reply_from_json(const nlohmann::json& j,
                                                   std::span<const BatchItem> request);

nlohmann::json error_body(const std::string& code, const std::string& message);
// "code: message" from an error body, or a prefix of the raw text when the
// body is not a protocol error (a proxy's HTML page, say).
std::string describe_error_body(const std::string& body);

// Serialises for the wire; text that is not valid UTF-8 is replaced by U+FFFD
// (JSON strings are Unicode; PROTOCOL.md "generate" output note).
std::string dump_for_wire(const nlohmann::json& j);

}  // namespace midtune::server
