// The ga-run command line (CLI11): `ga-run EXPERIMENT.yaml [--db PATH]
// [--quiet] [--new-experiment NAME] [--takeover] [--lease-timeout S]
// [--unit-prompts K] [--unit-timeout S]` (the last two under mpirun/srun),
// `validate`, `status`, `report`, `query`.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "core/cli/run_setup.hpp"
#include "schema/store.hpp"

namespace midtune::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;  // usage or configuration error
inline constexpr int kExitBusy = 3;   // another live process runs the experiment (its lease)
// Stopped on request (SIGTERM, SIGINT, SIGUSR1) after the evaluations in
// flight; everything finished is stored and the same command resumes.
// sysexits.h's EX_TEMPFAIL ("try again later"), which job scripts test for.
inline constexpr int kExitStopped = 75;

struct RunRequest {
  std::string experiment_file;
  std::string db;              // empty: storage.db of the file
  std::string new_experiment;  // empty: the file's name
  std::string device;          // empty: backend.device of the file; else cpu | cuda (in the fingerprint)
  bool quiet = false;
  bool takeover = false;                 // take the experiment's lease from a live owner
  double lease_timeout_seconds = LeasePolicy{}.stale_after_seconds;  // declared in the lease
  bool integrity_check = false;          // full PRAGMA integrity_check at open (default: quick_check)
  // Under an MPI launcher: prompts per unit of work handed to an evaluator
  // rank (the unit boundaries; 0 = parallel::kDefaultUnitPrompts).
  std::size_t unit_prompts = 0;
  // Under an MPI launcher: seconds an evaluator may take for one unit
  // before the job ends (0: no deadline).
  double unit_timeout_s = 0;
};

// Runs or resumes; prints progress to err and a summary to out. Started by
// an MPI launcher with several processes, runs as its ranks (mpi_run.hpp).
int run_experiment(const RunRequest& request, std::ostream& out, std::ostream& err);

// Builds the search's parts from the loaded experiment (the backend included).
using PrepareSearch = std::function<std::unique_ptr<PreparedSearch>(const Experiment&, const std::string& name)>;
// run_experiment with its parts built by `prepare`: what the driver rank runs.
int run_experiment_with(const RunRequest& request, const PrepareSearch& prepare, std::ostream& out,
                        std::ostream& err);
// Loads and checks an experiment file (and builds its objective and strategy
// when the backend is the synthetic test double, whose layer count is known).
int validate_experiment(const std::string& file, std::ostream& out, std::ostream& err);

int ga_run_main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace midtune::cli
