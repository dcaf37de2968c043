// `ga-run status DB`: per experiment, generations done, individuals,
// evaluations run and saved by the cache, prompts/s, run state.
#pragma once

#include <ostream>
#include <string>

namespace midtune::cli {

// Returns the exit status (0, or 1 with a message on err).
int print_status(const std::string& db_path, std::ostream& out, std::ostream& err);

}  // namespace midtune::cli
