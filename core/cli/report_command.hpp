// `ga-run report DB [--experiment NAME] [--format md|json|csv]`:
// per-generation best/mean, the best genome, its decoded per-layer RoPE
// scales (the Intervention stored with its evaluation) and per-position scores.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

namespace midtune::cli {

// The report as JSON (the md and csv forms are printed from it). Throws
// std::runtime_error when the experiment is missing or has no individuals.
nlohmann::json build_report(const std::string& db_path, const std::string& experiment);

// Returns the exit status: 0, 1 (database or experiment problem), 2 (bad format).
int print_report(const std::string& db_path, const std::string& experiment, const std::string& format,
                 std::ostream& out, std::ostream& err);

}  // namespace midtune::cli
