// Stopping a search on request: SIGTERM (Slurm's preemption and --signal,
// scancel, kill), SIGINT (Ctrl-C) and SIGUSR1 (what Open MPI's mpirun
// forwards to its ranks as is) make ga-run stop after the evaluation in
// flight and exit kExitStopped; the same command resumes. The handler only
// stores the signal's number in an atomic; the search loop reads it.
#pragma once

#include <atomic>
#include <string>

namespace midtune::cli {

// The signal that asked this process to stop, 0 while none did.
const std::atomic<int>& stop_request();
// "SIGTERM", "SIGINT", ... for the signal in stop_request().
std::string stop_signal_name();

// The search process (a plain ga-run, the driver rank): SIGTERM, SIGINT and
// SIGUSR1 set stop_request(). A second SIGINT ends the process at once, for
// a user who will not wait for the evaluation in flight.
void install_stop_handlers();

// An evaluator rank: ignores those signals. The launcher delivers them to
// every rank; the driver decides when the job stops and tells each
// evaluator, so no unit is cut short and the driver's exit status is the
// job's.
void ignore_stop_signals();

}  // namespace midtune::cli
