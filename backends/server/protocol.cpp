#include "backends/server/protocol.hpp"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "backends/digest.hpp"
#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune::server {
namespace {

using nlohmann::json;

constexpr double kAnyNumber = std::numeric_limits<double>::max();
constexpr long long kMaxInt = std::numeric_limits<int>::max();

std::string field_list() {
  std::string text;
  for (const std::string& field : all_intervention_fields()) text += (text.empty() ? "" : ", ") + field;
  return text;
}

std::string indexed(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

const json& array_field(ObjectReader& r, const std::string& key, std::size_t min_size, std::size_t max_size) {
  const json& v = r.required(key);
  if (!v.is_array()) protocol_error(r.path_of(key), "must be a list, got " + std::string(v.type_name()));
  if (v.size() < min_size || v.size() > max_size)
    protocol_error(r.path_of(key), "has " + std::to_string(v.size()) + " entries, allowed " +
                                       std::to_string(min_size) + ".." + std::to_string(max_size));
  return v;
}

std::vector<ByteSpan> read_chunks(const json& chunks, const std::string& path, std::size_t prompt_bytes) {
  std::vector<ByteSpan> out;
  out.reserve(chunks.size());
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const json& span = chunks[c];
    const std::string where = indexed(path, c);
    if (!span.is_array() || span.size() != 2 || !span[0].is_number_unsigned() || !span[1].is_number_unsigned())
      protocol_error(where, "must be a [begin, end] pair of integers >= 0");
    const auto begin = span[0].get<std::uint64_t>();
    const auto end = span[1].get<std::uint64_t>();
    if (begin > end) protocol_error(where, "begin " + std::to_string(begin) + " is after end " + std::to_string(end));
    if (end > prompt_bytes)
      protocol_error(where, "end " + std::to_string(end) + " is past the end of the prompt (" +
                                std::to_string(prompt_bytes) + " bytes)");
    out.push_back({static_cast<std::size_t>(begin), static_cast<std::size_t>(end)});
  }
  return out;
}

BatchItem read_item(const json& j, const std::string& path, const RequestLimits& limits, Mode mode) {
  ObjectReader r(j, path);
  BatchItem item;
  item.id = r.string("id", 1, limits.max_id_bytes);
  item.prompt_text = r.string("prompt", 1, limits.max_prompt_bytes);
  item.chunks = read_chunks(array_field(r, "chunks", 0, limits.max_chunks), r.path_of("chunks"),
                            item.prompt_text.size());
  item.gold = r.string("gold", mode == Mode::teacher_forced ? 1 : 0, limits.max_gold_bytes);
  item.gold_depth = r.number("gold_depth", 0.0, 1.0);
  r.reject_unknown();
  return item;
}

}  // namespace

std::string model_digest(const ModelIdentity& identity) {
  const std::string key = identity.key();
  return xxh3_128_text(std::as_bytes(std::span(key)));
}

const std::vector<std::string>& all_intervention_fields() { return intervention_fields(); }

std::vector<std::string> intervention_fields_used(const Intervention& iv) { return intervention_fields_set(iv); }

json info_to_json(const ServerInfo& info) {
  json j = info.identity.to_json();
  j["protocol_version"] = info.protocol_version;
  j["supports"] = info.supports;
  j["user_prompt"] = info.user_prompt ? json{{"prefix", info.user_prompt->prefix}, {"suffix", info.user_prompt->suffix}}
                                      : json(nullptr);
  return j;
}

ServerInfo info_from_json(const json& j) {
  ObjectReader r(j, "info");
  ServerInfo info;
  // The version first: a server of another version may differ in every other field.
  info.protocol_version = static_cast<int>(r.integer("protocol_version", 0, kMaxInt));
  ModelIdentity& id = info.identity;
  id.name = r.string("name", 1, 1024);
  id.architecture = r.string("architecture", 1, 256);
  id.layers = static_cast<int>(r.integer("layers", 1, kMaxInt));
  id.heads = static_cast<int>(r.integer("heads", 1, kMaxInt));
  id.kv_heads = static_cast<int>(r.integer("kv_heads", 1, kMaxInt));
  id.hidden = static_cast<int>(r.integer("hidden", 1, kMaxInt));
  id.tokenizer_hash = r.string("tokenizer_hash", 0, 1024);
  // Optional: a server of an older midtune does not send it (its results then
  // key on the model's name and shapes alone, as they always did).
  if (j.is_object() && j.contains("content_hash")) id.content_hash = r.string("content_hash", 1, 256);
  // Optional: only a server of a GPU engine says how it computes.
  if (j.is_object() && j.contains("precision")) id.precision = r.string("precision", 1, 64);
  const json& supports = array_field(r, "supports", 0, all_intervention_fields().size());
  info.supports.clear();
  for (std::size_t i = 0; i < supports.size(); ++i) {
    const auto& known = all_intervention_fields();
    if (!supports[i].is_string() ||
        std::find(known.begin(), known.end(), supports[i].get<std::string>()) == known.end())
      protocol_error(indexed("info.supports", i), "must be one of " + field_list());
    info.supports.push_back(supports[i].get<std::string>());
  }
  if (const json& wrap = r.required("user_prompt"); !wrap.is_null()) {
    ObjectReader w(wrap, "info.user_prompt");
    info.user_prompt = PromptTemplate{w.string("prefix", 0, 1 << 16), w.string("suffix", 0, 1 << 16)};
    w.reject_unknown();
  }
  r.reject_unknown();
  return info;
}

json evaluate_request_to_json(const Intervention& intervention, const RunOptions& options,
                              std::span<const BatchItem> items) {
  json list = json::array();
  for (const BatchItem& item : items) {
    json chunks = json::array();
    for (const ByteSpan& s : item.chunks) chunks.push_back({s.begin, s.end});
    list.push_back({{"id", item.id}, {"prompt", item.prompt_text}, {"chunks", std::move(chunks)},
                    {"gold", item.gold}, {"gold_depth", item.gold_depth}});
  }
  return {{"intervention", intervention.to_json()},
          {"mode", to_string(options.mode)},
          {"max_new_tokens", options.max_new_tokens},
          {"items", std::move(list)}};
}

EvaluateRequest evaluate_request_from_json(const json& j, const RequestLimits& limits) {
  ObjectReader r(j, "");
  EvaluateRequest req;
  const std::string mode = r.string("mode", 1, 64);
  if (mode != "generate" && mode != "teacher_forced")
    protocol_error("mode", "'" + mode + "' is not one of generate, teacher_forced");
  req.options.mode = mode_from_string(mode);
  req.options.max_new_tokens = static_cast<int>(r.integer("max_new_tokens", 1, limits.max_new_tokens));
  try {
    req.intervention = Intervention::from_json(r.required("intervention"));
  } catch (const method_checks::InvalidValue& e) {
    throw InvalidValueError(e.what());
  } catch (const std::invalid_argument& e) {
    throw ProtocolError(e.what());  // already "intervention.<field>: reason"
  } catch (const json::exception& e) {
    throw ProtocolError(std::string("intervention: ") + e.what());
  }
  const json& items = array_field(r, "items", 1, limits.max_items);
  std::unordered_set<std::string> ids;
  for (std::size_t i = 0; i < items.size(); ++i) {
    req.items.push_back(read_item(items[i], indexed("items", i), limits, req.options.mode));
    if (!ids.insert(req.items.back().id).second)
      protocol_error(indexed("items", i) + ".id", "'" + req.items.back().id + "' repeats an earlier id");
  }
  r.reject_unknown();
  return req;
}

json evaluate_reply_to_json(const std::vector<SampleOutput>& outputs) {
  json list = json::array();
  for (const SampleOutput& o : outputs)
    list.push_back({{"id", o.id}, {"output", o.output_text}, {"gold_emitted_first", o.gold_emitted_first},
                    {"gold_logprob", o.gold_logprob}, {"prompt_tokens", o.prompt_tokens},
                    {"wall_ms", o.wall_ms}});
  return {{"items", std::move(list)}};
}

std::vector<SampleOutput> evaluate_reply_from_json(const json& j, std::span<const BatchItem> request) {
  ObjectReader r(j, "reply");
  const json& items = array_field(r, "items", request.size(), request.size());
  std::vector<SampleOutput> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    ObjectReader item(items[i], indexed("reply.items", i));
    SampleOutput o;
    o.id = item.string("id", 0, std::numeric_limits<std::size_t>::max());
    if (o.id != request[i].id)
      protocol_error(item.path_of("id"), "'" + o.id + "' does not match the request's id '" + request[i].id + "'");
    o.output_text = item.string("output", 0, std::numeric_limits<std::size_t>::max());
    o.gold_emitted_first = item.boolean("gold_emitted_first");
    o.gold_logprob = item.number("gold_logprob", -kAnyNumber, kAnyNumber);
    o.prompt_tokens = static_cast<int>(item.integer("prompt_tokens", 0, kMaxInt));
    o.wall_ms = item.number("wall_ms", 0.0, kAnyNumber);
    item.reject_unknown();
    out.push_back(std::move(o));
  }
  r.reject_unknown();
  return out;
}

json error_body(const std::string& code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

std::string describe_error_body(const std::string& body) {
  try {
    const json j = json::parse(body);
    const json& e = j.at("error");
    return e.at("code").get<std::string>() + ": " + e.at("message").get<std::string>();
  } catch (const json::exception&) {
    constexpr std::size_t kShown = 200;
    return "reply is not a protocol error body: '" + body.substr(0, kShown) +
           (body.size() > kShown ? "...'" : "'");
  }
}

std::string dump_for_wire(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace midtune::server
