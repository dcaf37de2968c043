// The `server` backend (docs/design.md "Backends"): evaluates batches on one or
// more processes speaking PROTOCOL.md. Items are split into small chunks that
// one worker thread per endpoint pulls from a shared queue, so a slow endpoint
// takes less work and a dead one's chunks go to the others. Results come back
// in request order. A batch that no endpoint can complete throws
// BackendError; a failure is never turned into a score.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/server/endpoint_client.hpp"

namespace midtune::server {

struct ServerBackendOptions {
  std::vector<std::string> endpoints;  // "http://127.0.0.1:8080", ...
  RetryPolicy retry;
  // Items per request; 0 = about four chunks per endpoint, at most 16 items.
  std::size_t chunk_items = 0;
  // When set, every endpoint must serve exactly this model (ModelIdentity::key).
  std::optional<ModelIdentity> expected_identity;
  // An endpoint that failed is skipped for this long before it is tried
  // again (after re-checking /v1/info), unless no other endpoint is left.
  double dead_endpoint_cooldown_s = 30.0;
  // Bearer token for servers started with --token-file; empty = the
  // environment variable kServerTokenEnv, if set.
  std::string token;
};

// Per-endpoint state, for logs and tests.
struct EndpointStatus {
  std::string url;
  bool verified = false;        // /v1/info checked and matching
  std::string refusal;          // non-empty: identity or protocol mismatch, never used
  std::string last_error;       // the last failure, if any
  std::size_t items_last_run = 0;
};

// Throws std::invalid_argument naming the field when `intervention` uses a
// field the server does not support or a layer / head / channel the model
// does not have.
void check_intervention_fits(const Intervention& intervention, const ModelIdentity& model,
                             const std::vector<std::string>& supported_fields);

class ServerBackend : public Backend {
 public:
  // Checks /v1/info on every endpoint. Throws BackendError if the options are
  // invalid, if any endpoint that answers serves another model or protocol
  // version, or if none answers. Endpoints that do not answer yet are checked
  // before they receive work.
  explicit ServerBackend(ServerBackendOptions options);

  ModelIdentity identity() const override;
  std::vector<SampleOutput> run(const Intervention& intervention, const std::vector<BatchItem>& batch,
                                const RunOptions& options) override;
  void validate(const Intervention& intervention) const override;
  // user_prompt(), under the engine's name for the same model.
  std::optional<ChatWrapper> chat_wrapper() const override;

  std::vector<EndpointStatus> status() const;
  // The served model's chat template for one user message (/v1/info
  // user_prompt); the caller wraps prompts with it, as for the engine.
  std::optional<PromptTemplate> user_prompt() const;

 private:
  struct Endpoint {
    EndpointStatus status;
    std::chrono::steady_clock::time_point retry_after{};
  };
  class Run;

  // Compares a server's reply with the expected identity; returns the
  // refusal reason, or "" when it matches.
  std::string mismatch(const ServerInfo& info) const;
  // Records a verified /v1/info (the first one fixes the identity).
  void accept_info(std::size_t endpoint, const ServerInfo& info);
  std::vector<std::size_t> usable_endpoints() const;

  ServerBackendOptions options_;
  mutable std::mutex mutex_;  // guards everything below
  std::vector<Endpoint> endpoints_;
  std::optional<ServerInfo> reference_;  // identity and supports every endpoint must match
};

}  // namespace midtune::server
