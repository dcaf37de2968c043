// `ga-run report DB [--experiment NAME] [--format md|json|csv|html] [--out FILE]`:
// per-generation best/mean, the best genome, its decoded per-layer RoPE
// scales (the Intervention stored with its evaluation) and per-position scores.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "schema/store.hpp"

namespace midtune::report {

// The report as JSON (the md and csv forms are printed from it). Throws
// std::runtime_error when the experiment is missing or has no individuals.
nlohmann::json build_report(const std::string& db_path, const std::string& experiment,
                            Store::Check check = Store::Check::quick);

struct ReportOptions {
  std::string svg_path;  // empty: <experiment>-heldout.svg beside the database
  Store::Check check = Store::Check::quick;
  std::string out_path;  // empty: the report goes to `out`
};

// Returns the exit status: 0, 1 (database or experiment problem), 2 (bad format).
// Says on err where the held-out plot went (or why it was not written:
// the report itself does not depend on it).
int print_report(const std::string& db_path, const std::string& experiment, const std::string& format,
                 std::ostream& out, std::ostream& err, const ReportOptions& options = {});

}  // namespace midtune::report
