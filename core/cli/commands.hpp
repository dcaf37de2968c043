// The ga-run command line (CLI11): `ga-run EXPERIMENT.yaml [--db PATH]
// [--quiet] [--new-experiment NAME] [--takeover] [--lease-timeout S]`, `validate`, `status`, `report`, `query`.
#pragma once

#include <ostream>
#include <string>

#include "schema/store.hpp"

namespace midtune::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;  // usage or configuration error
inline constexpr int kExitBusy = 3;   // another live process runs the experiment (its lease)

struct RunRequest {
  std::string experiment_file;
  std::string db;              // empty: storage.db of the file
  std::string new_experiment;  // empty: the file's name
  bool quiet = false;
  bool takeover = false;                 // take the experiment's lease from a live owner
  double lease_timeout_seconds = LeasePolicy{}.stale_after_seconds;  // declared in the lease
  bool integrity_check = false;          // full PRAGMA integrity_check at open (default: quick_check)
};

// Runs or resumes; prints progress to err and a summary to out.
int run_experiment(const RunRequest& request, std::ostream& out, std::ostream& err);
// Loads and checks an experiment file (and builds its objective and strategy
// when the backend is the synthetic test double, whose layer count is known).
int validate_experiment(const std::string& file, std::ostream& out, std::ostream& err);

int ga_run_main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace midtune::cli
