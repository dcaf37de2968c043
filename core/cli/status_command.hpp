// `ga-run status DB`: per experiment, generations done, individuals,
// evaluations run and saved by the cache, prompts/s, run state.
#pragma once

#include <ostream>
#include <string>

#include "schema/store.hpp"

namespace midtune::cli {

// Returns the exit status (0, or 1 with a message on err).
// `check`: PRAGMA quick_check or the full integrity_check before reading.
int print_status(const std::string& db_path, std::ostream& out, std::ostream& err,
                 Store::Check check = Store::Check::quick);

}  // namespace midtune::cli
