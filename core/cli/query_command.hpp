// `ga-run query DB "SQL"`: one statement on a read-only connection.
#pragma once

#include <ostream>
#include <string>

namespace midtune::cli {

// Opens DB with SQLITE_OPEN_READONLY, refuses any statement that
// sqlite3_stmt_readonly says could write, prints the rows as a table.
// Returns the exit status: 0 answered, 1 refused or failed (message on err).
int run_query(const std::string& db_path, const std::string& sql, std::ostream& out, std::ostream& err);

}  // namespace midtune::cli
