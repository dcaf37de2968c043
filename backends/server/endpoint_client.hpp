// One evaluation server seen from the client: a request with a timeout,
// bounded retries with exponential backoff on failures that may pass
// (connection errors, timeouts, 5xx, malformed replies), none on 4xx.
// Not thread-safe: each worker thread owns its EndpointClient.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/server/protocol.hpp"

namespace httplib {
class Client;
}

namespace midtune::server {

// The environment variable the server backend reads its bearer token from
// when the experiment gives none.
inline constexpr const char* kServerTokenEnv = "MIDTUNE_SERVER_TOKEN";

// The bearer token in `path`: the file's text without surrounding whitespace
// (a trailing newline from `echo` is not part of it). Throws BackendError
// naming the file when it cannot be read, is empty or holds more than one word.
std::string read_token_file(const std::filesystem::path& path);

struct RetryPolicy {
  double timeout_s = 120.0;        // per request: send, and wait for the reply
  double connect_timeout_s = 10.0;  // a host that drops packets fails fast (capped by timeout_s)
  int retries = 3;                 // attempts after the first
  double backoff_initial_s = 0.1;  // wait before retry k is initial * 2^k, capped
  double backoff_max_s = 5.0;
};

// The endpoint stayed unreachable, slow or broken through every retry.
struct EndpointDown : BackendError {
  using BackendError::BackendError;
};
// The server refused the request itself (4xx): sending it again, here or to
// another endpoint, would fail the same way.
struct RequestRejected : BackendError {
  using BackendError::BackendError;
};

// The endpoint answered for another model than the one this client was told
// to expect (ga-serve restarted on another file behind the same address):
// nothing it sent may be stored, here or anywhere, under the expected model.
struct ModelChanged : RequestRejected {
  using RequestRejected::RequestRejected;
};

class EndpointClient {
 public:
  // url: "http://host:port". Throws BackendError if it does not parse.
  // token: sent as "Authorization: Bearer <token>" when non-empty.
  EndpointClient(std::string url, RetryPolicy policy, const std::string& token = {});
  ~EndpointClient();
  EndpointClient(const EndpointClient&) = delete;
  EndpointClient& operator=(const EndpointClient&) = delete;

  const std::string& url() const { return url_; }

  // GET /v1/info. Refuses (RequestRejected) a server of another protocol version.
  ServerInfo fetch_info(const std::atomic<bool>* cancel = nullptr);
  // From now on every evaluate reply must come from this model
  // (model_digest of its identity): the reply's kModelHeader is compared
  // with it, or, from a server that sends no such header (an older
  // midtune), /v1/info is read again after each reply. A mismatch throws
  // ModelChanged naming both models.
  void expect_model(const ModelIdentity& identity);

  // POST /v1/evaluate; the reply is checked against `items`.
  std::vector<SampleOutput> evaluate(const Intervention& intervention, const RunOptions& options,
                                     std::span<const BatchItem> items,
                                     const std::atomic<bool>* cancel = nullptr);

 private:
  template <class Parse>
  auto with_retries(const char* what, const std::atomic<bool>* cancel, Parse&& once)
      -> decltype(once());

  // Throws ModelChanged when `served` (a model digest) is not the expected one.
  void check_model(const std::string& served, const std::atomic<bool>* cancel);

  std::string url_;
  RetryPolicy policy_;
  std::optional<ModelIdentity> expected_model_;
  std::string expected_digest_;
  std::unique_ptr<httplib::Client> http_;
};

// Thrown inside one attempt when the failure may pass on a retry.
struct TransientFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace midtune::server
