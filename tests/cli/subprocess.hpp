// Runs build/ga-run (the integration tests) or another program (the peer
// tests) as a child process (fork/exec), capturing stdout and stderr in files.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/test_paths.hpp"

namespace midtune::testing {

inline std::string ga_run_path() { return midtune::testing::binary_dir() + "/ga-run"; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The uid a test run as root drops to with spawn_ga_run(..., unprivileged),
// so that file permissions bind it (root ignores them).
inline constexpr uid_t kUnprivilegedId = 65534;  // nobody
// The child's exit code when it could not drop to kUnprivilegedId.
inline constexpr int kCannotDropPrivileges = 126;

// Starts the program argv_text[0] (a path) with argv_text; stdout/stderr go
// to out_file/err_file. `unprivileged`: a root caller's child runs as
// kUnprivilegedId.
inline pid_t spawn_process(std::vector<std::string> argv_text, const std::string& out_file,
                           const std::string& err_file, bool unprivileged = false) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int out = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    if (unprivileged && geteuid() == 0 && (setgid(kUnprivilegedId) != 0 || setuid(kUnprivilegedId) != 0))
      _exit(kCannotDropPrivileges);
    std::vector<char*> argv;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Starts ga-run with `args` (see spawn_process).
inline pid_t spawn_ga_run(const std::vector<std::string>& args, const std::string& out_file,
                          const std::string& err_file, bool unprivileged = false) {
  std::vector<std::string> argv_text = {ga_run_path()};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  return spawn_process(std::move(argv_text), out_file, err_file, unprivileged);
}

struct Finished {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out, err;
};

inline Finished wait_for(pid_t pid, const std::string& out_file, const std::string& err_file) {
  int status = 0;
  waitpid(pid, &status, 0);
  Finished f;
  if (WIFEXITED(status)) f.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) f.signal = WTERMSIG(status);
  f.out = read_file(out_file);
  f.err = read_file(err_file);
  return f;
}

// Waits for `pid` at most `limit_s` seconds; a child still running then is
// killed (SIGKILL) and reported as timed_out, never left to hang the test.
inline Finished wait_bounded(pid_t pid, const std::string& out_file, const std::string& err_file, double limit_s,
                             bool* timed_out) {
  *timed_out = false;
  for (int waited_ms = 0;; waited_ms += 20) {
    siginfo_t info{};
    // WNOWAIT: only looks; wait_for reaps the child and reads its status.
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) break;
    if (waited_ms > limit_s * 1000) {
      kill(pid, SIGKILL);
      *timed_out = true;
      break;
    }
    usleep(20000);
  }
  return wait_for(pid, out_file, err_file);
}

inline Finished run_ga_run(const std::vector<std::string>& args, const std::string& dir, bool unprivileged = false) {
  const std::string out = dir + "/stdout.txt", err = dir + "/stderr.txt";
  return wait_for(spawn_ga_run(args, out, err, unprivileged), out, err);
}

// Runs argv_text to its end; its output is kept in dir/stdout.txt and dir/stderr.txt.
inline Finished run_process(const std::vector<std::string>& argv_text, const std::string& dir) {
  const std::string out = dir + "/stdout.txt", err = dir + "/stderr.txt";
  return wait_for(spawn_process(argv_text, out, err), out, err);
}

}  // namespace midtune::testing
