// A ga-serve child process on 127.0.0.1 with a system-chosen port, for
// integration tests. Killed (SIGKILL) and reaped when destroyed.
#pragma once

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_paths.hpp"

extern char** environ;

namespace midtune::server::testing {

class ServeProcess {
 public:
  // Starts `ga-serve --port 0 <args>` and waits (at most 20 s) for its
  // "listening on http://..." line.
  explicit ServeProcess(std::vector<std::string> args) {
    args.insert(args.begin(), {midtune::testing::binary_dir() + "/ga-serve", "--port", "0"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc != 0) throw std::runtime_error("cannot start " + args[0]);
    url_ = read_listening_line(out[0]);
    close(out[0]);
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  const std::string& url() const { return url_; }
  void signal(int sig) { kill(pid_, sig); }
  // Waits at most `timeout` for the process to exit; its exit code, or -1.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(10000);
    }
    return -1;
  }

 private:
  static std::string read_listening_line(int fd) {
    std::string line;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    char c;
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      if (read(fd, &c, 1) != 1) break;
      if (c == '\n') {
        const std::string marker = "listening on ";
        const auto at = line.find(marker);
        if (at == std::string::npos) throw std::runtime_error("ga-serve said: " + line);
        return line.substr(at + marker.size());
      }
      line += c;
    }
    throw std::runtime_error("ga-serve did not start listening: '" + line + "'");
  }

  pid_t pid_ = -1;
  std::string url_;
};

// Runs ga-serve with `args` to its exit (at most 20 s); exit code and stderr.
inline std::pair<int, std::string> run_to_exit(const std::string& args) {
  const std::string err = ::testing::TempDir() + "ga-serve-stderr.txt";
  const int status = std::system(("timeout 20 " + midtune::testing::binary_dir() + "/ga-serve " + args +
                                  " > /dev/null 2> " + err).c_str());
  std::ifstream in(err);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, std::string(std::istreambuf_iterator<char>(in), {})};
}

}  // namespace midtune::server::testing
