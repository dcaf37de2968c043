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

namespace midtune::server {

class BoundedHttpServer;

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
  // Slow and numerous clients (bounded_http_server.hpp): a connection that
  // sends nothing for read_timeout_s is closed, and so is one whose request
  // has not fully arrived request_deadline_s after its first byte. At most
  // max_connections are held, max_connections_per_peer from one address;
  // past either, the oldest one still reading a request is closed.
  double read_timeout_s = 3.0;
  double request_deadline_s = 30.0;
  int max_connections = 256;
  int max_connections_per_peer = 32;
};

// The shortest token accepted for an address other than loopback: anyone
// who can reach the port may guess it.
inline constexpr std::size_t kMinPublicTokenLength = 16;
// And the fewest different characters in it: "aaaaaaaaaaaaaaaa" or
// "1234123412341234" is long but guessable; a random token of 16 or more
// characters (openssl rand -hex 16) practically always has far more.
inline constexpr std::size_t kMinPublicTokenDistinct = 5;

// Why `token` is too weak for an address other than loopback ("" when it
// will do): "is N characters ..." or "uses only N different characters ...".
std::string public_token_problem(const std::string& token);

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
  // address and no token of kMinPublicTokenLength characters or more is set
  // (anyone who reaches it could use the model).
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
  std::unique_ptr<BoundedHttpServer> http_;
  std::mutex backend_mutex_;  // one evaluation at a time
  std::atomic<bool> stopping_{false};
  int listen_socket_ = -1;  // set while httplib binds (socket options callback)
};

}  // namespace midtune::server
