// Test helpers for the server backend: in-process HTTP servers on 127.0.0.1
// (fakes that misbehave on purpose, or a real EvaluationServer) and batches.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "backends/backend.hpp"
#include "backends/server/evaluation_server.hpp"

namespace midtune::server::testing {

// A raw connection to 127.0.0.1:port (for requests no client library would
// send) whose reads wait at most 5 s.
inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot connect to 127.0.0.1");
  }
  timeval guard{5, 0};  // no test waits longer for a reply
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  return fd;
}

// An httplib server on 127.0.0.1, any free port, serving on its own thread
// until destroyed. Register handlers on server() before start().
class LoopbackHttp {
 public:
  LoopbackHttp() = default;
  ~LoopbackHttp() { stop(); }
  httplib::Server& server() { return server_; }
  void start() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("cannot bind 127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();  // a stop() before this would be lost
  }
  void stop() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// A real EvaluationServer over `backend` on 127.0.0.1, serving on its own thread.
class LoopbackEvaluationServer {
 public:
  LoopbackEvaluationServer(Backend& backend, ServeOptions options = {}) : server_(backend, options) {
    port_ = server_.bind();
    thread_ = std::thread([this] { server_.serve(); });
    while (!server_.serving()) std::this_thread::yield();  // a stop() before this would be lost
  }
  ~LoopbackEvaluationServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  EvaluationServer server_;
  int port_ = 0;
  std::thread thread_;
};

// n items of a KV-retrieval-like batch with chunk spans inside each prompt.
inline std::vector<BatchItem> make_items(std::size_t n, const std::string& prefix = "item") {
  std::vector<BatchItem> items;
  for (std::size_t i = 0; i < n; ++i) {
    BatchItem it;
    it.id = prefix + "-" + std::to_string(i);
    it.prompt_text = "Key " + std::to_string(i) + " -> value; key x -> value y. Which value has key " +
                     std::to_string(i) + "?";
    it.chunks = {{0, 10}, {10, 30}};
    it.gold = "value" + std::to_string(i);
    it.gold_depth = static_cast<double>(i % 5) / 4.0;
    items.push_back(std::move(it));
  }
  return items;
}

// The answers that decide a score are identical (wall_ms is a measurement).
inline void expect_same_outputs(const std::vector<SampleOutput>& got, const std::vector<SampleOutput>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id);
    EXPECT_EQ(got[i].output_text, want[i].output_text);
    EXPECT_EQ(got[i].gold_emitted_first, want[i].gold_emitted_first);
    EXPECT_EQ(got[i].gold_logprob, want[i].gold_logprob);
    EXPECT_EQ(got[i].prompt_tokens, want[i].prompt_tokens);
  }
}

inline Intervention lpes_like(double scale) {
  Intervention iv;
  iv.rope_scale = {{scale}};
  return iv;
}

}  // namespace midtune::server::testing
