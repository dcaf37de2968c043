#include "core/cli/stop_signals.hpp"

#include <signal.h>

#include <cstring>

#include "schema/sqlite.hpp"

namespace midtune::cli {

namespace {

std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler may only touch a lock-free atomic");

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};

// Async-signal-safe: one store to a lock-free atomic; the first signal is kept.
extern "C" void on_stop_signal(int signal) {
  int none = 0;
  requested.compare_exchange_strong(none, signal);
}

void set_disposition(int signal, void (*handler)(int), int flags) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a signal must not fail a database or socket call with EINTR.
  action.sa_flags = SA_RESTART | flags;
  sigaction(signal, &action, nullptr);
}

}  // namespace

const std::atomic<int>& stop_request() { return requested; }

std::string stop_signal_name() {
  switch (requested.load()) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case 0: return "no signal";
    default: return "signal " + std::to_string(requested.load());
  }
}

void install_stop_handlers() {
  for (const int signal : kStopSignals)
    set_disposition(signal, on_stop_signal, signal == SIGINT ? SA_RESETHAND : 0);
  // A run queued behind another process's write to the results file stops
  // waiting too (Slurm allows 30 s between SIGTERM and SIGKILL).
  sql::stop_waits_on(&stop_request());
}

void ignore_stop_signals() {
  for (const int signal : kStopSignals) set_disposition(signal, SIG_IGN, 0);
}

}  // namespace midtune::cli
