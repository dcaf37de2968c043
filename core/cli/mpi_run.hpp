// `mpirun -n N ga-run EXPERIMENT.yaml` / `srun ga-run EXPERIMENT.yaml`: one
// search on N processes (core/parallel/ranks.hpp). Rank 0 runs the search
// as ga-run does, with a backend that hands units of prompts to ranks
// 1..N-1; each of those builds the experiment's backend on its own node and
// device and evaluates until rank 0 stops it.
#pragma once

#include <ostream>

#include "core/cli/commands.hpp"

namespace midtune::cli {

// The exit status is the driver's (rank 0); an evaluator ends 0 once the
// driver stops it, also after a failure the driver reports, so that the
// launcher keeps the driver alive to say what went wrong.
int run_on_ranks(const RunRequest& request, std::ostream& out, std::ostream& err);

}  // namespace midtune::cli
