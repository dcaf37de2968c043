#include "backends/server/evaluation_server.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <set>
#include <stdexcept>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <httplib.h>

#include "backends/server/bounded_http_server.hpp"
#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune::server {
namespace {

using nlohmann::json;

void reply_error(httplib::Response& res, int status, const std::string& code, const std::string& message) {
  res.status = status;
  res.set_content(dump_for_wire(error_body(code, message)), "application/json");
}

const char* default_code(int status) {
  switch (status) {
    case 400: return "invalid_request";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 401: return "unauthorized";
    case 413: return "payload_too_large";
    case 503: return "shutting_down";
    default: return status >= 500 ? "server_error" : "request_error";
  }
}

// The backend's answer must itself follow the protocol before it is sent.
void check_outputs(const std::vector<SampleOutput>& out, const std::vector<BatchItem>& items) {
  if (out.size() != items.size())
    throw BackendError("the backend returned " + std::to_string(out.size()) + " outputs for " +
                       std::to_string(items.size()) + " items");
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].id != items[i].id)
      throw BackendError("the backend answered item " + std::to_string(i) + " with id '" + out[i].id +
                         "', expected '" + items[i].id + "'");
    if (!std::isfinite(out[i].gold_logprob) || !std::isfinite(out[i].wall_ms) || out[i].wall_ms < 0 ||
        out[i].prompt_tokens < 0)
      throw BackendError("the backend returned a non-finite or negative number for item '" + items[i].id + "'");
  }
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr address{};
  return inet_pton(AF_INET, host.c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

std::vector<std::string> probe_supported_fields(const Backend& backend) {
  // Each field's probe is a setting every model can apply (layer 0, channel 0).
  std::vector<std::pair<std::string, Intervention>> probes;
  for (const MethodModule* owner : field_owners()) {
    Intervention probe;
    owner->set_probe(probe);
    probes.emplace_back(owner->field, std::move(probe));
  }
  std::vector<std::string> supported;
  for (const auto& [field, intervention] : probes) {
    try {
      backend.validate(intervention);
      supported.push_back(field);
    } catch (const std::exception&) {
    }
  }
  return supported;
}

EvaluationServer::EvaluationServer(Backend& backend, ServeOptions options)
    : backend_(backend),
      options_(std::move(options)),
      http_(std::make_unique<BoundedHttpServer>(
          ConnectionLimits{options_.read_timeout_s, options_.request_deadline_s, options_.max_connections,
                           options_.max_connections_per_peer},
          options_.token)) {
  info_.identity = backend_.identity();
  info_.user_prompt = options_.user_prompt;
  info_.supports = options_.supports.empty() ? probe_supported_fields(backend_) : options_.supports;
  install_routes();
}

EvaluationServer::~EvaluationServer() = default;

void EvaluationServer::install_routes() {
  BoundedHttpServer& s = *http_;
  s.set_payload_max_length(options_.limits.max_body_bytes);
  s.set_tcp_nodelay(true);  // small replies should not wait for the client's delayed ACK
  // httplib's default adds SO_REUSEPORT, which lets a second server bind a
  // port in use and silently take half its requests: possibly another model.
  s.set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket_ = sock;  // the last socket httplib tries is the one it binds
  });

  // Timeouts, deadlines and connection limits are BoundedHttpServer's; the
  // keep-alive timeout here is only what the replies' Keep-Alive header says.
  s.set_keep_alive_timeout(static_cast<time_t>(std::ceil(options_.read_timeout_s)));

  if (!options_.token.empty()) {
    // Runs once the headers are in, before any body is read. A wrong token
    // is refused even earlier, as its header line arrives (BoundedHttpServer).
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (bearer_token_matches(req.get_header_value("Authorization"), options_.token))
        return httplib::Server::HandlerResponse::Unhandled;
      reply_error(res, 401, "unauthorized",
                  req.has_header("Authorization") ? "wrong bearer token"
                                                  : "this server needs \"Authorization: Bearer <token>\"");
      BoundedHttpServer::close_after_reply();  // the unread body must not be parsed as the next request
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    });
  }

  // On every reply, errors included: whatever a client reads from this
  // process, it can tell which model answered.
  s.set_default_headers({{kModelHeader, model_digest(info_.identity)}});

  s.Get("/v1/info", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_for_wire(info_to_json(info_)), "application/json");
  });

  s.Post("/v1/evaluate", [this](const httplib::Request& req, httplib::Response& res) {
    // Read in full: from here the connection waits for the backend, and is
    // not closed to make room for new connections.
    BoundedHttpServer::request_read();
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::out_of_range& e) {  // a number literal past a double's range (1e999)
      return reply_error(res, 422, "invalid_input", std::string("a number in the body overflows: ") + e.what());
    } catch (const json::exception& e) {
      return reply_error(res, 400, "invalid_json", std::string("the body is not JSON: ") + e.what());
    }
    EvaluateRequest request;
    try {
      request = evaluate_request_from_json(body, options_.limits);
    } catch (const InvalidValueError& e) {
      return reply_error(res, 422, "invalid_input", e.what());
    } catch (const ProtocolError& e) {
      return reply_error(res, 400, "invalid_field", e.what());
    }
    try {
      for (const std::string& field : intervention_fields_used(request.intervention))
        if (std::find(info_.supports.begin(), info_.supports.end(), field) == info_.supports.end())
          throw std::invalid_argument("intervention." + field + ": not supported by this server");
      backend_.validate(request.intervention);
    } catch (const method_checks::InvalidValue& e) {
      return reply_error(res, 422, "invalid_input", e.what());
    } catch (const std::exception& e) {
      return reply_error(res, 422, "invalid_intervention", e.what());
    }
    std::vector<SampleOutput> out;
    {
      std::lock_guard lock(backend_mutex_);
      // Requests that waited behind the one in flight go to another endpoint.
      if (stopping_) return reply_error(res, 503, "shutting_down", "the server is shutting down");
      try {
        out = backend_.run(request.intervention, request.items, request.options);
        check_outputs(out, request.items);
      } catch (const InvalidInputError& e) {
        return reply_error(res, 422, "invalid_input", e.what());  // a retry would fail the same way
      } catch (const std::exception& e) {
        return reply_error(res, 500, "backend_error", e.what());
      }
    }
    res.set_content(dump_for_wire(evaluate_reply_to_json(out)), "application/json");
  });

  auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    reply_error(res, 405, "method_not_allowed", req.method + " is not allowed on " + req.path);
  };
  s.Post("/v1/info", not_allowed);
  s.Get("/v1/evaluate", not_allowed);
  s.Put("/v1/.*", not_allowed);
  s.Delete("/v1/.*", not_allowed);

  // Statuses httplib sets itself (404, 413, 400 for a broken request line)
  // still get a protocol error body.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // httplib says 400 for any request it could not read; say which limit it was.
    if (const auto failure = BoundedHttpServer::read_failure()) {
      reply_error(res, failure->status, failure->code, failure->message);
      return httplib::Server::HandlerResponse::Handled;
    }
    reply_error(res, res.status, default_code(res.status),
                "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path);
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_error(res, 500, "server_error", what);
  });
  s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    if (res.status < 400) return;
    // One write of the whole line: connections are logged from several
    // threads, and pieces written one by one interleave.
    const std::string line = "ga-serve: " + req.method + " " + req.path + " -> " + std::to_string(res.status) + " " +
                             describe_error_body(res.body) + "\n";
    std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  });
}

std::string public_token_problem(const std::string& token) {
  const std::string advice = " (e.g. openssl rand -hex 32)";
  if (token.size() < kMinPublicTokenLength)
    return "is " + std::to_string(token.size()) + " characters; an address other than loopback needs at least " +
           std::to_string(kMinPublicTokenLength) + advice;
  const std::set<char> distinct(token.begin(), token.end());
  if (distinct.size() < kMinPublicTokenDistinct)
    return "uses only " + std::to_string(distinct.size()) + " different characters, which is guessable; an address "
           "other than loopback needs at least " + std::to_string(kMinPublicTokenDistinct) + advice;
  return "";
}

int EvaluationServer::bind() {
  if (!is_loopback_host(options_.host) && options_.token.empty())
    throw std::runtime_error("refusing to listen on " + options_.host +
                             " without a token: anyone who can reach it could run the model "
                             "(give --token-file, or listen on 127.0.0.1)");
  if (const std::string problem = public_token_problem(options_.token);
      !is_loopback_host(options_.host) && !problem.empty())
    throw std::runtime_error("refusing to listen on " + options_.host + ": the token " + problem);
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                                      : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port <= 0)
    throw std::runtime_error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                             " (address in use, or not an address of this machine)");
  // httplib listens with a backlog of 5: a burst of connections (idle ones
  // included) would make the kernel drop SYNs, and every client after them
  // waits a second for the retransmit. Listening again only resizes the queue.
  if (listen_socket_ >= 0) ::listen(listen_socket_, options_.max_connections * 2);
  return port;
}

void EvaluationServer::serve() {
  if (!stopping_) http_->listen_after_bind();
}

bool EvaluationServer::serving() const { return http_->is_running(); }

void EvaluationServer::stop() {
  stopping_ = true;
  http_->stop();
}

}  // namespace midtune::server
