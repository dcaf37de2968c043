#include "backends/server/bounded_http_server.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "backends/server/protocol.hpp"

namespace midtune::server {

using Clock = std::chrono::steady_clock;

namespace {

// Request line and headers together; httplib checks each line only after
// buffering all of it, so without this a client could send gigabytes of one
// header line within the deadline.
constexpr std::size_t kMaxHeaderBytes = 64u << 10;

bool same_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// Compares all of both strings whatever the first difference, so the reply
// time does not tell a guesser how much of the token was right.
bool same_secret(std::string_view given, std::string_view expected) {
  if (expected.empty()) return given.empty();
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  return diff == 0;
}

std::string numeric_host(const sockaddr_storage& address, socklen_t length, int* port) {
  char host[NI_MAXHOST] = "";
  char service[NI_MAXSERV] = "";
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host, sizeof host, service, sizeof service,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  if (port != nullptr) *port = std::atoi(service);
  return host;
}

std::string peer_of(int fd, int* port = nullptr) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  return numeric_host(address, length, port);
}

}  // namespace

bool bearer_token_matches(std::string_view authorization, const std::string& token) {
  const std::string_view value = trim(authorization);
  const auto space = value.find_first_of(" \t");
  if (space == std::string_view::npos || !same_ignoring_case(value.substr(0, space), "bearer")) return false;
  return same_secret(trim(value.substr(space)), token);
}

// One accepted connection; the table's fields are guarded by its mutex.
class ConnectionTable;

struct Connection {
  int fd = -1;
  ConnectionTable* table = nullptr;
  std::string peer;
  Clock::time_point since;     // start of the current wait for (or read of) a request
  bool reading = true;         // false while its request is being answered
  bool authenticated = false;  // sent the right token in this connection
  bool evicted = false;        // closed to make room; its thread is finishing
  bool close_after_reply = false;
  std::optional<BoundedHttpServer::ReadFailure> failure;
};

// The connections held, and which one to close when a limit is reached.
class ConnectionTable {
 public:
  explicit ConnectionTable(const ConnectionLimits& limits) : limits_(limits) {}

  // Admits `c`, first closing the oldest reader of its address (at the
  // per-address limit) or of all (at the overall limit). False when every
  // connection in the way is answering a request.
  bool admit(Connection& c) {
    std::lock_guard lock(mutex_);
    if (count(&c.peer) >= static_cast<std::size_t>(limits_.max_per_peer) && !evict_oldest_reader(&c.peer))
      return false;
    if (count(nullptr) >= static_cast<std::size_t>(limits_.max_connections) && !evict_oldest_reader(nullptr))
      return false;
    c.since = Clock::now();
    held_.push_back(&c);
    return true;
  }
  // Before the socket is closed: a connection out of the table is never shut down by another thread.
  void remove(Connection& c) {
    std::lock_guard lock(mutex_);
    held_.erase(std::remove(held_.begin(), held_.end(), &c), held_.end());
  }
  void set_reading(Connection& c, bool reading) {
    std::lock_guard lock(mutex_);
    c.reading = reading;
    if (reading) c.since = Clock::now();
  }
  void set_authenticated(Connection& c) {
    std::lock_guard lock(mutex_);
    c.authenticated = true;
  }
  bool evicted(const Connection& c) {
    std::lock_guard lock(mutex_);
    return c.evicted;
  }
  // Every connection thread is taken: free one for the connection waiting.
  void make_room() {
    std::lock_guard lock(mutex_);
    evict_oldest_reader(nullptr);
  }

 private:
  std::size_t count(const std::string* peer) const {
    return static_cast<std::size_t>(std::count_if(held_.begin(), held_.end(), [&](const Connection* c) {
      return !c->evicted && (peer == nullptr || c->peer == *peer);
    }));
  }
  bool evict_oldest_reader(const std::string* peer) {
    Connection* victim = nullptr;
    for (Connection* c : held_) {
      if (c->evicted || !c->reading || (peer != nullptr && c->peer != *peer)) continue;
      // Not yet authenticated before authenticated, then the oldest.
      if (victim == nullptr || std::tie(c->authenticated, c->since) < std::tie(victim->authenticated, victim->since))
        victim = c;
    }
    if (victim == nullptr) return false;
    // Its poll wakes at once and its read sees the end; it leaves the table
    // itself before closing the socket, so this descriptor is still its own.
    ::shutdown(victim->fd, SHUT_RDWR);
    victim->evicted = true;
    return true;
  }

  const ConnectionLimits& limits_;
  std::mutex mutex_;
  std::vector<Connection*> held_;
};

namespace {

thread_local Connection* current_connection = nullptr;

// One thread per connection, up to `max_threads`; beyond that a connection
// waits for a thread, and the oldest reader is closed to free one.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  ConnectionThreads(std::size_t max_threads, ConnectionTable& table) : max_threads_(max_threads), table_(table) {}

  void enqueue(std::function<void()> fn) override {
    bool full = false;
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(fn));
      if (idle_ < jobs_.size()) {
        if (threads_.size() < max_threads_)
          threads_.emplace_back([this] { work(); });
        else
          full = true;
      }
    }
    cond_.notify_one();
    if (full) table_.make_room();
  }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cond_.notify_all();
    for (std::thread& t : threads_) t.join();  // enqueue() is no longer called (the accept loop has ended)
  }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ++idle_;
      cond_.wait(lock, [this] { return !jobs_.empty() || stopping_; });
      --idle_;
      if (jobs_.empty()) return;
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const std::size_t max_threads_;
  ConnectionTable& table_;
  std::mutex mutex_;
  std::condition_variable cond_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

// The socket as httplib reads and writes it, with the request's deadline,
// the idle timeout and the Authorization check applied as bytes pass.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(Connection& conn, ConnectionTable& table, const ConnectionLimits& limits,
                   const std::string& token, const std::atomic<int>& listener)
      : conn_(conn), table_(table), limits_(limits), token_(token), listener_(listener) {}

  // Waits (idle timeout) for the first byte of the next request.
  bool wait_for_request() {
    return off_ < len_ || wait(POLLIN, Clock::now() + seconds(limits_.idle_timeout_s), true);
  }
  void begin_request() {
    deadline_ = Clock::now() + seconds(limits_.request_deadline_s);
    write_deadline_.reset();
    in_headers_ = true;
    request_line_ = true;
    header_bytes_ = 0;
    line_.clear();
    content_length_.reset();
  }

  bool is_readable() const override { return off_ < len_ || wait(POLLIN, read_until(), true); }
  bool is_writable() const override { return wait(POLLOUT, write_until(), false); }

  ssize_t read(char* ptr, size_t size) override {
    if (conn_.failure) return -1;
    if (off_ == len_) {
      if (Clock::now() >= deadline_ || !wait(POLLIN, read_until(), true)) {
        if (Clock::now() >= deadline_)
          conn_.failure = BoundedHttpServer::ReadFailure{
              408, "request_timeout",
              "the request did not arrive within " + std::to_string(limits_.request_deadline_s) +
                  " s of its first byte (ga-serve --request-deadline-s)"};
        return -1;
      }
      const ssize_t n = ::recv(conn_.fd, buffer_.data(), buffer_.size(), 0);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<std::size_t>(n);
    }
    const std::size_t k = std::min(size, len_ - off_);
    if (in_headers_) scan_headers(buffer_.data() + off_, k);
    if (conn_.failure) return -1;  // httplib answers 400, which the error handler turns into this failure
    std::memcpy(ptr, buffer_.data() + off_, k);
    off_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, size_t size) override { return send_some(ptr, size); }

  // A whole reply of our own with "Connection: close" (a refusal httplib never sees).
  void send_error(int status, const char* reason, const std::string& code, const std::string& message) {
    const std::string body = dump_for_wire(error_body(code, message));
    const std::string reply = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                              "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\nConnection: close\r\n\r\n" + body;
    for (std::size_t sent = 0; sent < reply.size();) {
      const ssize_t n = send_some(reply.data() + sent, reply.size() - sent);
      if (n <= 0) return;
      sent += static_cast<std::size_t>(n);
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = peer_of(conn_.fd, &port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    ip = getsockname(conn_.fd, reinterpret_cast<sockaddr*>(&address), &length) == 0
             ? numeric_host(address, length, &port)
             : "";
  }
  int socket() const override { return conn_.fd; }

 private:
  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  Clock::time_point read_until() const {
    return std::min(deadline_, Clock::now() + seconds(limits_.idle_timeout_s));
  }
  Clock::time_point write_until() const {
    if (!write_deadline_) write_deadline_ = Clock::now() + seconds(limits_.request_deadline_s);
    return *write_deadline_;
  }

  // Polls in short slices so that a stopping server (its listening socket
  // closed) is noticed; false at `until`, on an error, or when stopping and
  // `reading` (a reply still goes out: the request in flight is answered).
  bool wait(short events, Clock::time_point until, bool reading) const {
    for (;;) {
      if (reading && listener_ == -1) return false;
      // Rounded up: a wait that ends for time ends at or after `until`.
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{conn_.fd, events, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
      if (ready > 0) return true;  // readable, writable, or closed: the next recv/send says which
      if (ready < 0 && errno != EINTR) return false;
    }
  }

  ssize_t send_some(const char* ptr, std::size_t size) {
    if (!wait(POLLOUT, write_until(), false)) return -1;
    return ::send(conn_.fd, ptr, size, MSG_NOSIGNAL);
  }

  // Follows the request line and headers as httplib reads them.
  void scan_headers(const char* bytes, std::size_t n) {
    for (std::size_t i = 0; i < n && in_headers_; ++i) {
      if (++header_bytes_ > kMaxHeaderBytes) {
        conn_.failure = BoundedHttpServer::ReadFailure{
            431, "headers_too_large",
            "the request line and headers are longer than " + std::to_string(kMaxHeaderBytes) + " bytes"};
        return;
      }
      if (bytes[i] != '\n') {
        if (line_.size() < kMaxHeaderBytes) line_ += bytes[i];
        continue;
      }
      const std::string_view line = trim(line_);
      if (line.empty() && !request_line_) in_headers_ = false;
      if (!request_line_) on_header(line);
      request_line_ = false;
      line_.clear();
    }
  }
  void on_header(std::string_view line) {
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) return;
    const std::string_view name = trim(line.substr(0, colon));
    if (same_ignoring_case(name, "content-length")) return on_content_length(trim(line.substr(colon + 1)));
    if (token_.empty() || !same_ignoring_case(name, "authorization")) return;
    if (bearer_token_matches(line.substr(colon + 1), token_))
      table_.set_authenticated(conn_);
    else
      conn_.failure = BoundedHttpServer::ReadFailure{401, "unauthorized", "wrong bearer token"};
  }

  // A length that is not a number, or two that disagree, leaves the body's
  // end in doubt (request smuggling through a proxy that reads the other
  // one): refused at once (RFC 9112 6.3), before any body is waited for.
  void on_content_length(std::string_view value) {
    const bool digits = !value.empty() && value.size() <= 19 &&
                        std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
      conn_.failure = BoundedHttpServer::ReadFailure{
          400, "invalid_content_length", "Content-Length '" + std::string(value.substr(0, 32)) + "' is not a length"};
    } else if (content_length_ && *content_length_ != value) {
      conn_.failure = BoundedHttpServer::ReadFailure{
          400, "invalid_content_length",
          "two Content-Length headers disagree (" + *content_length_ + " and " + std::string(value) + ")"};
    }
    content_length_ = std::string(value);
  }

  Connection& conn_;
  ConnectionTable& table_;
  const ConnectionLimits& limits_;
  const std::string& token_;
  const std::atomic<int>& listener_;
  std::array<char, 16384> buffer_{};
  std::size_t off_ = 0;
  std::size_t len_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();
  mutable std::optional<Clock::time_point> write_deadline_;  // set by the reply's first write
  bool in_headers_ = false;
  bool request_line_ = false;
  std::size_t header_bytes_ = 0;
  std::string line_;
  std::optional<std::string> content_length_;  // this request's, as first given
};

}  // namespace

BoundedHttpServer::BoundedHttpServer(ConnectionLimits limits, std::string token)
    : limits_(limits), token_(std::move(token)), table_(std::make_unique<ConnectionTable>(limits_)) {
  if (!(limits_.idle_timeout_s > 0) || !(limits_.request_deadline_s > 0) || limits_.max_connections < 1 ||
      limits_.max_per_peer < 1)
    throw std::invalid_argument("connection limits must be positive");
  // A few threads beyond the limit let refusals (503) and closing
  // connections finish while the limit is held.
  const auto threads = static_cast<std::size_t>(limits_.max_connections) + 8;
  new_task_queue = [this, threads] { return new ConnectionThreads(threads, *table_); };
}

BoundedHttpServer::~BoundedHttpServer() = default;

void BoundedHttpServer::request_read() {
  if (current_connection != nullptr) current_connection->table->set_reading(*current_connection, false);
}

void BoundedHttpServer::close_after_reply() {
  if (current_connection != nullptr) current_connection->close_after_reply = true;
}

std::optional<BoundedHttpServer::ReadFailure> BoundedHttpServer::read_failure() {
  return current_connection != nullptr ? current_connection->failure : std::nullopt;
}

bool BoundedHttpServer::process_and_close_socket(int sock) {
  Connection conn;
  conn.fd = sock;
  conn.table = table_.get();
  conn.peer = peer_of(sock);
  ConnectionStream stream(conn, *table_, limits_, token_, svr_sock_);
  if (!table_->admit(conn)) {
    stream.send_error(503, "Service Unavailable", "busy",
                      "too many connections from " + conn.peer + " are answering requests; try again later");
  } else {
    current_connection = &conn;
    for (std::size_t left = keep_alive_max_count_; left > 0 && stream.wait_for_request(); --left) {
      if (table_->evicted(conn)) break;
      stream.begin_request();
      conn.failure.reset();
      bool closed = false;
      const bool ok = process_request(stream, left == 1, closed, nullptr);
      if (!ok || closed || conn.close_after_reply || conn.failure) break;
      table_->set_reading(conn, true);
    }
    current_connection = nullptr;
    table_->remove(conn);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return true;
}

}  // namespace midtune::server
