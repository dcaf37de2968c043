// Serves any midtune::Backend over PROTOCOL.md (the core of `ga-serve`).
// Every request is validated before it reaches the backend and a bad one is
// answered 4xx with the reason; evaluations run one at a time because a
// backend owns one model. stop() lets the evaluation in flight finish and
// answers requests still waiting with 503 so their clients go elsewhere.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "backends/backend.hpp"
#include "backends/server/protocol.hpp"

namespace httplib {
class Server;
}

namespace midtune::server {

struct ServeOptions {
  std::string host = "127.0.0.1";  // loopback unless the user asks otherwise
  int port = 0;                    // 0 = any free port (see bind())
  RequestLimits limits;
  // Intervention fields the served backend implements (/v1/info `supports`);
  // empty = ask the backend (probe_supported_fields).
  std::vector<std::string> supports;
  // The served model's chat template for one user message; nullopt when
  // prompts are used as written (the test double).
  std::optional<PromptTemplate> user_prompt;
  // Non-empty: every request must carry "Authorization: Bearer <token>"
  // (else 401). Required to listen on anything but a loopback address.
  std::string token;
  // A connection that sends nothing for this long is closed, so idle or
  // half-sent requests cannot hold a worker for long.
  double read_timeout_s = 3.0;
  // Connections served at once; more wait until a worker is free (each
  // worker is freed within read_timeout_s by a client that stalls).
  int max_connections = 64;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// The Intervention fields `backend` accepts: each field is tried alone, with
// a setting every model can apply (layer 0, channel 0), through validate().
std::vector<std::string> probe_supported_fields(const Backend& backend);

class EvaluationServer {
 public:
  EvaluationServer(Backend& backend, ServeOptions options);
  ~EvaluationServer();
  EvaluationServer(const EvaluationServer&) = delete;
  EvaluationServer& operator=(const EvaluationServer&) = delete;

  // Binds the listening socket and returns the port. Throws
  // std::runtime_error when the address cannot be bound, or is not a loopback
  // address and no token is set (anyone who reaches it could use the model).
  int bind();
  // Serves until stop(); returns once the request in flight is answered.
  void serve();
  // Thread-safe (not async-signal-safe: call it from a signal-waiting thread).
  void stop();
  bool stopping() const { return stopping_; }
  // True once serve() accepts connections (a stop() before that is lost by
  // httplib, so callers that stop early wait for this first).
  bool serving() const;

 private:
  void install_routes();

  Backend& backend_;
  ServeOptions options_;
  ServerInfo info_;
  std::unique_ptr<httplib::Server> http_;
  std::mutex backend_mutex_;  // one evaluation at a time
  std::atomic<bool> stopping_{false};
  int listen_socket_ = -1;  // set while httplib binds (socket options callback)
};

}  // namespace midtune::server
