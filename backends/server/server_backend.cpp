#include "backends/server/server_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "methods/registry.hpp"

namespace midtune::server {
namespace {

using Clock = std::chrono::steady_clock;

std::size_t auto_chunk_items(std::size_t items, std::size_t endpoints) {
  constexpr std::size_t kChunksPerEndpoint = 4, kMaxChunk = 16;
  const std::size_t want = (items + kChunksPerEndpoint * endpoints - 1) / (kChunksPerEndpoint * endpoints);
  return std::clamp<std::size_t>(want, 1, kMaxChunk);
}

}  // namespace

void check_intervention_fits(const Intervention& iv, const ModelIdentity& model,
                             const std::vector<std::string>& supported) {
  for (const std::string& field : intervention_fields_used(iv))
    if (std::find(supported.begin(), supported.end(), field) == supported.end())
      throw std::invalid_argument("intervention." + field + ": not supported by the server serving " + model.name);
  validate_intervention(iv, model.shape());
}

ServerBackend::ServerBackend(ServerBackendOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty()) throw BackendError("backend.endpoints: give at least one server URL");
  if (options_.token.empty())
    if (const char* token = std::getenv(kServerTokenEnv)) options_.token = token;
  for (const std::string& url : options_.endpoints) {
    if (std::count(options_.endpoints.begin(), options_.endpoints.end(), url) > 1)
      throw BackendError("backend.endpoints: '" + url + "' is listed twice");
    Endpoint endpoint;
    endpoint.status.url = url;
    endpoints_.push_back(endpoint);
  }
  std::vector<std::string> unreachable;
  for (std::size_t e = 0; e < endpoints_.size(); ++e) {
    EndpointClient client(endpoints_[e].status.url, options_.retry, options_.token);
    ServerInfo info;
    try {
      info = client.fetch_info();
    } catch (const EndpointDown& err) {
      endpoints_[e].status.last_error = err.what();
      unreachable.push_back(err.what());
      continue;
    }  // RequestRejected (another protocol version) propagates: refuse.
    if (std::string why = mismatch(info); !why.empty())
      throw BackendError("server " + endpoints_[e].status.url + " refused: " + why);
    accept_info(e, info);
  }
  if (!reference_) {
    std::string all;
    for (const auto& u : unreachable) all += "\n  " + u;
    throw BackendError("no evaluation server answered /v1/info:" + all);
  }
  for (const auto& u : unreachable)
    std::cerr << "midtune: warning: " << u << " (it is checked again before it gets work)\n";
}

std::string ServerBackend::mismatch(const ServerInfo& info) const {
  if (options_.expected_identity && info.identity.key() != options_.expected_identity->key())
    return "it serves " + info.identity.key() + ", the experiment expects " + options_.expected_identity->key();
  std::lock_guard lock(mutex_);
  if (reference_ && info.identity.key() != reference_->identity.key())
    return "it serves " + info.identity.key() + ", another endpoint of this experiment serves " +
           reference_->identity.key() + " (results of different models must not mix)";
  if (reference_ && info.supports != reference_->supports)
    return "it supports other intervention fields than the other endpoints";
  if (reference_ && info.user_prompt != reference_->user_prompt)
    return "it wraps prompts in another chat template than the other endpoints";
  return "";
}

void ServerBackend::accept_info(std::size_t endpoint, const ServerInfo& info) {
  std::lock_guard lock(mutex_);
  if (!reference_) reference_ = info;
  endpoints_[endpoint].status.verified = true;
}

ModelIdentity ServerBackend::identity() const {
  std::lock_guard lock(mutex_);
  return reference_->identity;
}

void ServerBackend::validate(const Intervention& intervention) const {
  std::lock_guard lock(mutex_);
  check_intervention_fits(intervention, reference_->identity, reference_->supports);
}

std::optional<PromptTemplate> ServerBackend::user_prompt() const {
  std::lock_guard lock(mutex_);
  return reference_->user_prompt;
}

std::optional<ChatWrapper> ServerBackend::chat_wrapper() const {
  const auto wrap = user_prompt();
  if (!wrap) return std::nullopt;
  return ChatWrapper{chat_template_name(identity()), [wrap = *wrap](const std::string& message) {
                       return WrappedUserMessage{wrap.prefix + message + wrap.suffix, wrap.prefix.size()};
                     }};
}

std::vector<EndpointStatus> ServerBackend::status() const {
  std::lock_guard lock(mutex_);
  std::vector<EndpointStatus> out;
  for (const auto& e : endpoints_) out.push_back(e.status);
  return out;
}

std::vector<std::size_t> ServerBackend::usable_endpoints() const {
  std::lock_guard lock(mutex_);
  std::vector<std::size_t> live, not_refused;
  const auto now = Clock::now();
  for (std::size_t e = 0; e < endpoints_.size(); ++e) {
    if (!endpoints_[e].status.refusal.empty()) continue;
    not_refused.push_back(e);
    if (endpoints_[e].retry_after <= now) live.push_back(e);
  }
  // When every endpoint is cooling down, try them all rather than fail at once.
  return live.empty() ? not_refused : live;
}

// One call of run(): the chunk queue and the worker threads pulling from it.
class ServerBackend::Run {
 public:
  Run(ServerBackend& backend, const Intervention& intervention, const std::vector<BatchItem>& batch,
      const RunOptions& options, std::size_t chunk_items)
      : backend_(backend), intervention_(intervention), batch_(batch), options_(options),
        outputs_(batch.size()) {
    for (std::size_t begin = 0; begin < batch.size(); begin += chunk_items) queue_.push_back(begin);
    chunk_items_ = chunk_items;
  }

  std::vector<SampleOutput> execute(const std::vector<std::size_t>& endpoints) {
    std::vector<std::thread> workers;
    for (std::size_t e : endpoints) workers.emplace_back([this, e] { work(e); });
    for (auto& w : workers) w.join();
    if (!rejection_.empty()) throw BackendError(rejection_);
    if (!queue_.empty()) {
      std::string why;
      for (const auto& f : failures_) why += "\n  " + f;
      throw BackendError("evaluation failed: " + std::to_string(queue_.size()) +
                         " chunk(s) of the batch could not be evaluated on any endpoint:" + why);
    }
    return std::move(outputs_);
  }

 private:
  std::span<const BatchItem> chunk(std::size_t begin) const {
    return std::span<const BatchItem>(batch_).subspan(begin, std::min(chunk_items_, batch_.size() - begin));
  }

  // Checks /v1/info on an endpoint that has not been (re)verified; false if
  // it cannot be used.
  bool verify(std::size_t e, EndpointClient& client) {
    {
      std::lock_guard lock(backend_.mutex_);
      if (backend_.endpoints_[e].status.verified) return true;
    }
    std::string refusal;
    try {
      const ServerInfo info = client.fetch_info(&cancel_);
      refusal = backend_.mismatch(info);
      if (refusal.empty()) {
        backend_.accept_info(e, info);
        return true;
      }
    } catch (const RequestRejected& err) {
      refusal = err.what();
    } catch (const EndpointDown& err) {
      mark_down(e, err.what());
      return false;
    }
    std::lock_guard lock(backend_.mutex_);
    backend_.endpoints_[e].status.refusal = refusal;
    failures_.push_back(client.url() + " refused: " + refusal);
    const std::string line = "midtune: server " + client.url() + " refused: " + refusal + "\n";
    std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));  // one write: workers log at once
    return false;
  }

  void mark_down(std::size_t e, const std::string& error) {
    std::lock_guard lock(backend_.mutex_);
    auto& endpoint = backend_.endpoints_[e];
    endpoint.status.last_error = error;
    endpoint.status.verified = false;  // it may come back serving something else
    endpoint.retry_after = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(backend_.options_.dead_endpoint_cooldown_s));
    failures_.push_back(error);
  }

  // Pulls chunks until the queue is drained and nothing is in flight. A chunk
  // in flight elsewhere may fail and come back, so idle workers wait for it.
  void work(std::size_t e) {
    try {
      work_on(e);
    } catch (const std::exception& err) {  // a bug or bad_alloc: fail the batch, never hang or terminate
      {
        std::lock_guard lock(queue_mutex_);
        if (rejection_.empty()) rejection_ = std::string("evaluation failed: ") + err.what();
        cancel_ = true;
      }
      ready_.notify_all();
    }
  }

  void work_on(std::size_t e) {
    EndpointClient client(backend_.endpoints_[e].status.url, backend_.options_.retry, backend_.options_.token);
    std::size_t done = 0;
    if (verify(e, client)) {
      {
        std::lock_guard lock(backend_.mutex_);
        client.expect_model(backend_.reference_->identity);
      }
      while (true) {
        std::size_t begin;
        {
          std::unique_lock lock(queue_mutex_);
          ready_.wait(lock, [&] { return cancel_ || !queue_.empty() || in_flight_ == 0; });
          if (cancel_ || queue_.empty()) break;
          begin = queue_.front();
          queue_.pop_front();
          ++in_flight_;
        }
        const auto items = chunk(begin);
        try {
          auto out = client.evaluate(intervention_, options_, items, &cancel_);
          std::move(out.begin(), out.end(), outputs_.begin() + static_cast<std::ptrdiff_t>(begin));
          done += items.size();
          finish_chunk(std::nullopt);
        } catch (const RequestRejected& err) {
          if (dynamic_cast<const ModelChanged*>(&err) != nullptr) {
            std::lock_guard lock(backend_.mutex_);
            backend_.endpoints_[e].status.refusal = err.what();  // never used again by this backend
            backend_.endpoints_[e].status.verified = false;
          }
          {
            std::lock_guard lock(queue_mutex_);
            if (rejection_.empty()) rejection_ = err.what();
            cancel_ = true;
          }
          finish_chunk(begin);
          break;
        } catch (const EndpointDown& err) {
          if (!cancel_) mark_down(e, err.what());  // a cancelled retry loop says nothing about the endpoint
          finish_chunk(begin);
          break;
        }
      }
    }
    std::lock_guard lock(backend_.mutex_);
    backend_.endpoints_[e].status.items_last_run = done;
  }

  // Ends a chunk in flight; a failed chunk goes back to the front of the queue.
  void finish_chunk(std::optional<std::size_t> failed_begin) {
    {
      std::lock_guard lock(queue_mutex_);
      --in_flight_;
      if (failed_begin) queue_.push_front(*failed_begin);
    }
    ready_.notify_all();
  }

  ServerBackend& backend_;
  const Intervention& intervention_;
  const std::vector<BatchItem>& batch_;
  const RunOptions& options_;
  std::size_t chunk_items_ = 1;
  std::vector<SampleOutput> outputs_;  // each slot written by exactly one worker

  std::mutex queue_mutex_;
  std::condition_variable ready_;
  std::deque<std::size_t> queue_;  // first item index of each chunk not yet done
  std::size_t in_flight_ = 0;
  std::atomic<bool> cancel_{false};
  std::string rejection_;              // a 4xx: the batch itself is wrong
  std::vector<std::string> failures_;  // guarded by backend_.mutex_
};

std::vector<SampleOutput> ServerBackend::run(const Intervention& intervention, const std::vector<BatchItem>& batch,
                                             const RunOptions& options) {
  if (batch.empty()) return {};
  const auto endpoints = usable_endpoints();
  if (endpoints.empty()) throw BackendError("evaluation failed: every server endpoint was refused (see status())");
  const std::size_t chunk_items =
      options_.chunk_items > 0 ? options_.chunk_items : auto_chunk_items(batch.size(), endpoints.size());
  {
    std::lock_guard lock(mutex_);
    for (auto& e : endpoints_) e.status.items_last_run = 0;
  }
  Run run(*this, intervention, batch, options, chunk_items);
  return run.execute(endpoints);
}

}  // namespace midtune::server
