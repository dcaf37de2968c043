#include "core/cli/query_command.hpp"

#include <filesystem>

#include "core/cli/table.hpp"
#include "schema/store.hpp"

namespace midtune::cli {

int run_query(const std::string& db_path, const std::string& sql_text, std::ostream& out, std::ostream& err) {
  if (!std::filesystem::is_regular_file(db_path)) {
    err << "ga-run query: " << db_path << ": no such database file\n";
    return 1;
  }
  try {
    const QueryResult result = run_read_only_query(db_path, sql_text);
    std::vector<Row> rows;
    for (const auto& cells : result.rows) {
      Row row;
      for (const auto& cell : cells) row.push_back(cell.value_or("NULL"));
      rows.push_back(std::move(row));
    }
    if (!result.columns.empty()) print_table(out, result.columns, rows);
    out << "(" << rows.size() << (rows.size() == 1 ? " row)\n" : " rows)\n");
    return 0;
  } catch (const sql::SqlError& e) {
    err << "ga-run query: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace midtune::cli
