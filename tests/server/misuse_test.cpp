// ga-serve under misuse, all on 127.0.0.1 with bounded waits: bearer-token
// authentication, no open address without a token, idle half-sent
// connections that must not stall /v1/info, and 4xx (not retried) for
// requests that can never succeed.
#include <arpa/inet.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <gtest/gtest.h>

#include "backends/server/endpoint_client.hpp"
#include "backends/synthetic/synthetic_test_double.hpp"
#include "tests/server/loopback.hpp"

namespace midtune::server {
namespace {

using testing::connect_loopback;
using testing::LoopbackEvaluationServer;
using Clock = std::chrono::steady_clock;

RetryPolicy quick_policy() {
  RetryPolicy p;
  p.timeout_s = 5.0;
  p.retries = 2;
  p.backoff_initial_s = 0.01;
  return p;
}

TEST(ServerAuth, TokenIsRequiredAndChecked) {
  SyntheticTestDoubleBackend backend{SyntheticTestDoubleConfig{}};
  ServeOptions options;
  options.token = "s3cret-token";
  LoopbackEvaluationServer server(backend, options);
  httplib::Client http(server.url());
  http.set_read_timeout(std::chrono::seconds(5));

  const auto missing = http.Get("/v1/info");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 401);
  EXPECT_NE(missing->body.find("Authorization: Bearer"), std::string::npos) << missing->body;
  http.set_bearer_token_auth("s3cret-tokeX");
  const auto wrong = http.Get("/v1/info");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_NE(wrong->body.find("wrong bearer token"), std::string::npos) << wrong->body;
  http.set_bearer_token_auth("s3cret-token");
  const auto right = http.Get("/v1/info");
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200);

  // The client sends the token; without it the refusal is final (no retries)
  // and says what to set.
  EXPECT_NO_THROW(EndpointClient(server.url(), quick_policy(), "s3cret-token").fetch_info());
  EndpointClient anonymous(server.url(), quick_policy());
  try {
    anonymous.fetch_info();
    FAIL() << "a request without the token must be refused";
  } catch (const RequestRejected& e) {
    EXPECT_NE(std::string(e.what()).find("401"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(kServerTokenEnv), std::string::npos) << e.what();
  }
}

TEST(ServerAuth, BearerSchemeIsCaseInsensitive) {
  SyntheticTestDoubleBackend backend{SyntheticTestDoubleConfig{}};
  ServeOptions options;
  options.token = "s3cret-token";
  LoopbackEvaluationServer server(backend, options);
  httplib::Client http(server.url());
  http.set_read_timeout(std::chrono::seconds(5));
  for (const std::string value : {"bearer s3cret-token", "BEARER  s3cret-token ", "Bearer\ts3cret-token"}) {
    const auto res = http.Get("/v1/info", {{"Authorization", value}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << value;
  }
  for (const std::string value : {"bearers3cret-token", "Basic s3cret-token", "s3cret-token", "Bearer s3cret"}) {
    const auto res = http.Get("/v1/info", {{"Authorization", value}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << value;
  }
}


// The server's reply up to its close (the status line and the error body
// may come in separate segments); each recv waits at most the 5 s guard.
std::string reply_until_closed(int fd) {
  std::string reply;
  char buffer[512];
  for (ssize_t n; reply.size() < 8192 && (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;)
    reply.append(buffer, static_cast<std::size_t>(n));
  return reply;
}

TEST(ServerAuth, AWrongTokenIsRefusedAsItsHeaderLineArrives) {
  SyntheticTestDoubleBackend backend{SyntheticTestDoubleConfig{}};
  ServeOptions options;
  options.token = "s3cret-token";
  options.read_timeout_s = 10.0;  // the refusal must not be a timeout's
  LoopbackEvaluationServer server(backend, options);
  const int fd = connect_loopback(server.port());
  // The headers never end; the wrong token alone is enough to refuse.
  const std::string head = "POST /v1/evaluate HTTP/1.1\r\nAuthorization: Bearer guess\r\nContent-Le";
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  const auto started = Clock::now();
  const std::string reply = reply_until_closed(fd);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  ::close(fd);
  EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 401") << reply;
  EXPECT_NE(reply.find("wrong bearer token"), std::string::npos) << reply;
  EXPECT_LT(seconds, 4.0);  // normally milliseconds; a timeout would be 10 s
}

// A request whose body length is in doubt (two Content-Length headers that
// disagree, or one that is not a number) is answered 400 at once, before any
// body is waited for: the server and a proxy in front of it must never read
// two different requests out of the same bytes.
TEST(ServerHttp, AContentLengthInDoubtIs400AtOnce) {
  SyntheticTestDoubleBackend backend{SyntheticTestDoubleConfig{}};
  ServeOptions options;
  options.read_timeout_s = 10.0;  // the refusal must not be a timeout's
  LoopbackEvaluationServer server(backend, options);
  for (const std::string lengths : {"Content-Length: 5\r\nContent-Length: 50\r\n", "Content-Length: -1\r\n",
                                    "Content-Length: 1e3\r\n"}) {
    const int fd = connect_loopback(server.port());
    const std::string head = "POST /v1/evaluate HTTP/1.1\r\nHost: 127.0.0.1\r\n" + lengths + "\r\n{}";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    const auto started = Clock::now();
    const std::string reply = reply_until_closed(fd);
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    ::close(fd);
    EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 400") << lengths << reply;
    EXPECT_NE(reply.find("invalid_content_length"), std::string::npos) << reply;
    EXPECT_LT(seconds, 4.0) << lengths;  // normally milliseconds; a timeout would be 10 s
  }
}

TEST(ServerAuth, NonLoopbackAddressNeedsAToken) {
  SyntheticTestDoubleBackend backend{SyntheticTestDoubleConfig{}};
  for (const std::string host : {"0.0.0.0", "::", "192.0.2.1"}) {
    ServeOptions options;
    options.host = host;
    EvaluationServer server(backend, options);
    try {
      server.bind();
      FAIL() << host << ": bound without a token";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("without a token"), std::string::npos) << e.what();
    }
  }
  for (const std::string host : {"0.0.0.0", "::"}) {
    ServeOptions options;
    options.host = host;
    options.token = std::string(kMinPublicTokenLength - 1, 'k');
    EvaluationServer server(backend, options);
    try {
      server.bind();
      FAIL() << host << ": bound with a short token";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("at least 16"), std::string::npos) << e.what();
    }
  }
  // Long enough but guessable: one character, or a short cycle.
  for (const std::string& token : {std::string(kMinPublicTokenLength, 'k'), std::string("1234123412341234")}) {
    ServeOptions options;
    options.host = "0.0.0.0";
    options.token = token;
    EvaluationServer server(backend, options);
    try {
      server.bind();
      FAIL() << token << ": bound with a guessable token";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("different characters, which is guessable"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(public_token_problem("3f9a0c71d2e84b56"), "");
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.3.2.1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("128.0.0.1"));
  EXPECT_FALSE(is_loopback_host("10.0.0.1"));
}

// A TCP connection that sends half a request and then nothing.
class HalfSentRequest {
 public:
  explicit HalfSentRequest(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("cannot connect to 127.0.0.1");
    const std::string head = "GET /v1/info HTTP/1.1\r\nHost: 127.0.0.1\r\n";  // no blank line: never ends
    if (::send(fd_, head.data(), head.size(), MSG_NOSIGNAL) < 0) throw std::runtime_error("send failed");
  }
  ~HalfSentRequest() { ::close(fd_); }
  HalfSentRequest(const HalfSentRequest&) = delete;
  HalfSentRequest& operator=(const HalfSentRequest&) = delete;

 private:
  int fd_;
};

TEST(ServerSlowClients, IdleHalfSentConnectionsDoNotStallInfo) {
  SyntheticTestDoubleBackend backend{SyntheticTestDoubleConfig{}};
  LoopbackEvaluationServer server(backend);
  std::vector<std::unique_ptr<HalfSentRequest>> idle;
  for (int i = 0; i < 30; ++i) idle.push_back(std::make_unique<HalfSentRequest>(server.port()));
  httplib::Client http(server.url());
  http.set_read_timeout(std::chrono::seconds(10));
  const auto started = Clock::now();
  const auto info = http.Get("/v1/info");
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->status, 200);
  EXPECT_LT(seconds, 2.0) << "30 idle clients held /v1/info for " << seconds << " s";
}

TEST(ServerSlowClients, AStalledClientIsDisconnectedAfterTheReadTimeout) {
  SyntheticTestDoubleBackend backend{SyntheticTestDoubleConfig{}};
  ServeOptions options;
  options.read_timeout_s = 0.3;
  LoopbackEvaluationServer server(backend, options);
  // The server gives up on the request (answers 400 and closes, or just
  // closes) well before our own 5 s guard.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval guard{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  const std::string head = "GET /v1/info HTTP/1.1\r\n";
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  const auto started = Clock::now();
  char buffer[256];
  const auto n = ::recv(fd, buffer, sizeof buffer, 0);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  ::close(fd);
  if (n > 0) EXPECT_EQ(std::string(buffer, 12), "HTTP/1.1 400");
  EXPECT_GT(seconds, 0.2);  // not refused outright: it waited for the rest
  EXPECT_LT(seconds, 3.0) << "the server kept a stalled connection for " << seconds << " s";
}

TEST(ServerSlowClients, ARequestStillArrivingAtItsDeadlineGets408) {
  SyntheticTestDoubleBackend backend{SyntheticTestDoubleConfig{}};
  ServeOptions options;
  options.request_deadline_s = 0.5;  // the idle timeout (3 s) is never reached: a byte every 50 ms
  LoopbackEvaluationServer server(backend, options);
  const int fd = connect_loopback(server.port());
  const std::string head = "GET /v1/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  const auto started = Clock::now();
  std::string reply;
  // At most 5 s of trickling (100 bytes); the server should answer after 0.5 s.
  for (int i = 0; i < 100 && reply.empty(); ++i) {
    ::send(fd, "x", 1, MSG_NOSIGNAL);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) reply = reply_until_closed(fd);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  ::close(fd);
  EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 408") << reply;
  EXPECT_NE(reply.find("request_timeout"), std::string::npos) << reply;
  EXPECT_GT(seconds, 0.4);
  EXPECT_LT(seconds, 4.5) << "the server kept a trickling connection for " << seconds << " s";
}

// Fails every evaluation the way `Error` says.
template <class Error>
class FailingBackend : public SyntheticTestDoubleBackend {
 public:
  FailingBackend() : SyntheticTestDoubleBackend(SyntheticTestDoubleConfig{}) {}
  std::vector<SampleOutput> run(const Intervention&, const std::vector<BatchItem>&, const RunOptions&) override {
    ++runs;
    throw Error("item 'a': 5000 prompt tokens exceed the model context 2048");
  }
  int runs = 0;
};

TEST(ServerErrors, PermanentInputErrorsAre4xxAndNotRetried) {
  FailingBackend<InvalidInputError> backend;
  LoopbackEvaluationServer server(backend);
  EndpointClient client(server.url(), quick_policy());
  const auto items = testing::make_items(1);
  try {
    client.evaluate(testing::lpes_like(1.5), RunOptions{}, items);
    FAIL() << "an input the model cannot take must be refused";
  } catch (const RequestRejected& e) {
    EXPECT_NE(std::string(e.what()).find("422"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exceed the model context"), std::string::npos) << e.what();
  }
  EXPECT_EQ(backend.runs, 1);  // sent once: a retry would fail the same way
}

TEST(ServerErrors, OtherBackendFailuresAre5xxAndRetried) {
  FailingBackend<BackendError> backend;
  LoopbackEvaluationServer server(backend);
  EndpointClient client(server.url(), quick_policy());
  const auto items = testing::make_items(1);
  EXPECT_THROW(client.evaluate(testing::lpes_like(1.5), RunOptions{}, items), EndpointDown);
  EXPECT_EQ(backend.runs, 3);  // the first attempt and 2 retries
}

}  // namespace
}  // namespace midtune::server
