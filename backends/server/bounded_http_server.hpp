// An httplib::Server that slow or numerous clients cannot take over.
//
// httplib 0.11.4 serves each connection on a worker of a fixed pool, and its
// read timeout restarts at every recv: a client that sends a header byte a
// second holds a worker for as long as it likes, and a few dozen of them
// take the whole pool, so every real request waits. This server replaces
// httplib's connection loop (process_and_close_socket) and its pool:
//  - every admitted connection has a thread of its own, so reading one
//    request never waits for another connection;
//  - a request's line, headers and body must all arrive within
//    request_deadline_s of its first byte (each wait is for the time left
//    until that deadline, never a fresh timeout), and its reply must be taken
//    within the same time; a connection that sends nothing for idle_timeout_s
//    is closed;
//  - at most max_per_peer connections from one address and max_connections
//    in all. A connection past either limit closes the oldest connection (of
//    that address, or of all) that is still reading a request; with a token,
//    one that has not shown the right token goes first. A real client sends
//    its request in milliseconds, so the oldest reader is a slow one. A
//    connection whose request is being answered is never closed for another;
//    when all are, the new connection gets 503 `busy` (clients retry 5xx).
//  - the Authorization header is checked as soon as its line has arrived: a
//    wrong token is answered 401 at once and the rest is not read.
// So a valid request is read and answered while any number of connections
// trickle bytes: it either has a thread beside theirs, or, at a limit, takes
// the place of the oldest of them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <httplib.h>

namespace midtune::server {

struct ConnectionLimits {
  double idle_timeout_s = 3.0;       // nothing received for this long: closed
  double request_deadline_s = 30.0;  // first byte to last byte of a request (and its reply)
  int max_connections = 256;         // held at once, each on its own thread
  int max_per_peer = 32;             // held at once from one address
};

// "Bearer <token>" with the token equal to `token`: the scheme name is
// case-insensitive (RFC 9110 11.1), the token compared in time independent
// of where it differs.
bool bearer_token_matches(std::string_view authorization, const std::string& token);

class ConnectionTable;

class BoundedHttpServer : public httplib::Server {
 public:
  // `token` non-empty: Authorization headers are checked as they arrive
  // (a request without one is for the pre-routing handler to refuse).
  BoundedHttpServer(ConnectionLimits limits, std::string token);
  ~BoundedHttpServer() override;

  // For handlers, on the connection's thread. request_read(): the request
  // has been read in full and is being answered, so the connection is no
  // longer closed to make room for another.
  static void request_read();
  // The connection is closed after this reply (a refusal sent before the
  // body was read: the body must not be taken for the next request).
  static void close_after_reply();
  // Why reading the request on this thread's connection failed, when it was
  // this server's doing (a deadline, a size limit, a wrong token): {status,
  // code, message} for the error handler, as httplib itself only says 400.
  struct ReadFailure {
    int status;
    std::string code;
    std::string message;
  };
  static std::optional<ReadFailure> read_failure();

 private:
  bool process_and_close_socket(int sock) override;

  ConnectionLimits limits_;
  std::string token_;
  std::unique_ptr<ConnectionTable> table_;
};

}  // namespace midtune::server
