// `ga-run eval EXPERIMENT.yaml [--intervention FILE.json | --best]
// [--against baseline|FILE.json] [--split search|heldout] [--db PATH]`: one
// Intervention (default: none, the baseline) evaluated on a split of the
// experiment's data, through the evaluation cache, printed as the
// per-position table with mean, gap, std, U-shape index and Pearson r; with
// --against, the second intervention beside it and the held-out report's
// paired statistics (Wilson intervals, McNemar, paired bootstrap, verdict).
// Also the held-out step that ends a search.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "core/cli/run_setup.hpp"
#include "core/experiment/experiment.hpp"
#include "schema/store.hpp"

namespace midtune::cli {

struct EvalRequest {
  std::string experiment_file;
  std::string intervention_file;  // JSON of an Intervention (methods/intervention.hpp)
  bool best = false;              // the best individual of the file's experiment in --db
  std::string against;            // empty, "baseline" or a JSON Intervention file
  std::string split = "heldout";  // search | heldout
  std::string db;                 // empty: storage.db of the file
  std::string device;             // empty: backend.device of the file; else cpu | cuda
};

// Registers the `eval` subcommand, filling `request`; ga_run_main calls
// run_eval when the returned subcommand was given.
CLI::App* add_eval_command(CLI::App& app, EvalRequest& request);
int run_eval(const EvalRequest& request, std::ostream& out, std::ostream& err);

// After a search: evaluates its best, the baseline and PI at the mean scale
// (or the paper default) on the held-out split with the search's backend
// and objective (cached, so a rerun costs nothing), stores them in
// heldout_results and prints them side by side.
void run_heldout_step(Store& store, const Experiment& experiment, PreparedSearch& search, std::int64_t experiment_id,
                      std::ostream& out);

}  // namespace midtune::cli
