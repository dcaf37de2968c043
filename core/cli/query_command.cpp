#include "core/cli/query_command.hpp"

#include <filesystem>

#include "core/cli/table.hpp"
#include "schema/sqlite.hpp"

namespace midtune::cli {

int run_query(const std::string& db_path, const std::string& sql_text, std::ostream& out, std::ostream& err) {
  if (!std::filesystem::is_regular_file(db_path)) {
    err << "ga-run query: " << db_path << ": no such database file\n";
    return 1;
  }
  try {
    sql::Database db(db_path, sql::Database::Mode::read_only);
    sql::Statement statement = db.prepare(sql_text);
    if (!statement.readonly()) {
      err << "ga-run query: refused: the statement would modify " << db_path
          << " (query is read-only; use the sqlite3 shell to change a database)\n  SQL: " << sql_text << '\n';
      return 1;
    }
    Row header;
    for (int c = 0; c < statement.column_count(); ++c) header.push_back(statement.column_name(c));
    std::vector<Row> rows;
    while (statement.step()) {
      Row row;
      for (int c = 0; c < statement.column_count(); ++c)
        row.push_back(statement.is_null(c) ? "NULL" : statement.column_text(c));
      rows.push_back(std::move(row));
    }
    if (!header.empty()) print_table(out, header, rows);
    out << "(" << rows.size() << (rows.size() == 1 ? " row)\n" : " rows)\n");
    return 0;
  } catch (const sql::SqlError& e) {
    err << "ga-run query: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace midtune::cli
