#include "backends/server/endpoint_client.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <httplib.h>

namespace midtune::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Sleeps in short steps so a cancelled run stops waiting at once.
void backoff_sleep(double seconds, const std::atomic<bool>* cancel) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    if (cancel && cancel->load()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Turns an HTTP result into a JSON body, classifying every failure.
json reply_json(const httplib::Result& res, const std::string& url, const char* what) {
  if (!res)
    throw TransientFailure("no reply (" + httplib::to_string(res.error()) +
                           "; connection refused, lost, or timed out)");
  const int status = res->status;
  if (status == 401)
    throw RequestRejected("server " + url + " rejected " + what + " with HTTP 401 (wrong or missing token: set " +
                          std::string(kServerTokenEnv) + " or the backend's token_file): " +
                          describe_error_body(res->body));
  if (status >= 400 && status < 500)
    throw RequestRejected("server " + url + " rejected " + what + " with HTTP " + std::to_string(status) +
                          ": " + describe_error_body(res->body));
  if (status != 200)
    throw TransientFailure("HTTP " + std::to_string(status) + ": " + describe_error_body(res->body));
  try {
    return json::parse(res->body);
  } catch (const json::parse_error& e) {
    throw TransientFailure(std::string("malformed reply, not JSON: ") + e.what());
  }
}

}  // namespace

std::string read_token_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw BackendError(path.string() + ": cannot read the token file");
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  const char* space = " \t\r\n";
  const auto first = token.find_first_not_of(space);
  if (first == std::string::npos) throw BackendError(path.string() + ": the token file is empty");
  token = token.substr(first, token.find_last_not_of(space) - first + 1);
  if (token.find_first_of(space) != std::string::npos)
    throw BackendError(path.string() + ": the token must be one word on one line");
  return token;
}

EndpointClient::EndpointClient(std::string url, RetryPolicy policy, const std::string& token)
    : url_(std::move(url)), policy_(policy) {
  if (url_.rfind("http://", 0) != 0 && url_.rfind("https://", 0) != 0)
    throw BackendError("endpoint '" + url_ + "': must start with http:// or https:// (for example http://127.0.0.1:8080)");
  if (!(policy_.timeout_s > 0) || !(policy_.connect_timeout_s > 0) || policy_.retries < 0 ||
      policy_.backoff_initial_s < 0)
    throw BackendError("endpoint '" + url_ + "': timeouts must be > 0, retries and backoff >= 0");
  http_ = std::make_unique<httplib::Client>(url_);
  if (!http_->is_valid()) throw BackendError("endpoint '" + url_ + "': not a valid URL (scheme://host:port)");
  const auto timeout = std::chrono::duration<double>(policy_.timeout_s);
  http_->set_connection_timeout(std::chrono::duration<double>(std::min(policy_.connect_timeout_s, policy_.timeout_s)));
  http_->set_read_timeout(timeout);
  http_->set_write_timeout(timeout);
  http_->set_keep_alive(true);
  http_->set_tcp_nodelay(true);  // headers and body go out as separate writes; Nagle would delay the second
  if (!token.empty()) http_->set_bearer_token_auth(token);
}

EndpointClient::~EndpointClient() = default;

template <class Once>
auto EndpointClient::with_retries(const char* what, const std::atomic<bool>* cancel, Once&& once)
    -> decltype(once()) {
  std::string last_error;
  int attempts = 0;
  for (int attempt = 0; attempt <= policy_.retries; ++attempt) {
    if (cancel && cancel->load()) break;
    if (attempt > 0)
      backoff_sleep(std::min(policy_.backoff_max_s, policy_.backoff_initial_s * std::pow(2.0, attempt - 1)),
                    cancel);
    ++attempts;
    try {
      return once();
    } catch (const TransientFailure& e) {
      last_error = e.what();
      http_->stop();  // drop a connection that may be half-read
    }
  }
  throw EndpointDown("server " + url_ + ": " + what + " failed after " + std::to_string(attempts) +
                     " attempt(s); last error: " + (last_error.empty() ? "cancelled" : last_error));
}

ServerInfo EndpointClient::fetch_info(const std::atomic<bool>* cancel) {
  return with_retries("GET /v1/info", cancel, [&] {
    const json j = reply_json(http_->Get("/v1/info"), url_, "GET /v1/info");
    // The version decides how to read everything else, so it is checked first.
    if (j.is_object() && j.contains("protocol_version") && j["protocol_version"] != kProtocolVersion)
      throw RequestRejected("server " + url_ + " speaks protocol version " + j["protocol_version"].dump() +
                            ", this client speaks " + std::to_string(kProtocolVersion));
    try {
      return info_from_json(j);
    } catch (const ProtocolError& e) {
      throw TransientFailure(std::string("malformed /v1/info reply: ") + e.what());
    }
  });
}

std::vector<SampleOutput> EndpointClient::evaluate(const Intervention& intervention, const RunOptions& options,
                                                   std::span<const BatchItem> items,
                                                   const std::atomic<bool>* cancel) {
  std::string body;
  try {
    body = evaluate_request_to_json(intervention, options, items).dump();
  } catch (const json::type_error& e) {
    throw RequestRejected(std::string("cannot send the batch: a prompt, gold or id is not valid UTF-8 (") +
                          e.what() + ")");
  }
  std::string served;  // the reply's model digest; empty: the server sends none
  std::vector<SampleOutput> outputs = with_retries("POST /v1/evaluate", cancel, [&] {
    const httplib::Result res = http_->Post("/v1/evaluate", body, "application/json");
    const json j = reply_json(res, url_, "POST /v1/evaluate");
    served = res->get_header_value(kModelHeader);
    try {
      return evaluate_reply_from_json(j, items);
    } catch (const ProtocolError& e) {
      throw TransientFailure(std::string("malformed /v1/evaluate reply: ") + e.what());
    }
  });
  if (expected_model_) {
    // A server that names no model is asked again after the reply: had the
    // process behind the address changed before it answered, it still serves
    // the other model now.
    check_model(served.empty() ? model_digest(fetch_info(cancel).identity) : served, cancel);
  }
  return outputs;
}

void EndpointClient::expect_model(const ModelIdentity& identity) {
  expected_model_ = identity;
  expected_digest_ = model_digest(identity);
}

void EndpointClient::check_model(const std::string& served, const std::atomic<bool>* cancel) {
  if (served == expected_digest_) return;
  // Say what it serves now, where the server still tells.
  std::string now = "model " + served;
  try {
    const ServerInfo info = fetch_info(cancel);
    if (model_digest(info.identity) == served) now = "'" + info.identity.name + "' (" + info.identity.key() + ")";
  } catch (const BackendError&) {
  }
  throw ModelChanged("server " + url_ + " now answers for " + now + ", not for the model this search began with, '" +
                     expected_model_->name + "' (" + expected_model_->key() +
                     "): it was restarted on another model file. Nothing it answered is stored; restart it on "
                     "the search's model and run the same command to resume");
}

}  // namespace midtune::server
