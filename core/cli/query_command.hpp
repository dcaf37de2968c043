// `ga-run query DB "SQL"`: one statement on a read-only connection.
#pragma once

#include <ostream>
#include <string>

#include "schema/store.hpp"

namespace midtune::cli {

// run_read_only_query (schema/store.hpp: a read-only connection that refuses
// any statement that could write), the rows printed as a table while they
// arrive, within `limits` (--timeout, --max-rows).
// Returns the exit status: 0 answered, 1 refused, stopped or failed (message on err).
int run_query(const std::string& db_path, const std::string& sql, std::ostream& out, std::ostream& err,
              const QueryLimits& limits = {});

}  // namespace midtune::cli
