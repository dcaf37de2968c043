#include "core/cli/query_command.hpp"

#include <cstdio>
#include <filesystem>

#include "core/report/table.hpp"

namespace midtune::cli {

namespace {

// The table takes its column widths from the first rows (held until this
// many arrived, or the statement ended); later rows print as they come, so
// memory stays bounded whatever the statement returns. A query of up to
// this many rows prints exactly as a whole table would.
constexpr size_t kWidthRows = 200;

class StreamedTable {
 public:
  explicit StreamedTable(std::ostream& out) : out_(out) {}
  void columns(const std::vector<std::string>& names) { header_ = names; }
  void row(const std::vector<QueryCell>& cells) {
    report::Row row;
    for (const QueryCell& cell : cells) row.push_back(cell.value_or("NULL"));
    if (widths_.empty()) {
      first_.push_back(std::move(row));
      if (first_.size() == kWidthRows) flush();
    } else {
      report::print_table_line(out_, widths_, row);
    }
  }
  // Prints what is held (the header at least, when there are columns).
  void flush() {
    if (header_.empty() || !widths_.empty()) return;
    widths_ = report::table_widths(header_, first_);
    report::print_table_line(out_, widths_, header_);
    report::print_table_rule(out_, widths_);
    for (const report::Row& row : first_) report::print_table_line(out_, widths_, row);
    first_.clear();
  }

 private:
  std::ostream& out_;
  report::Row header_;
  std::vector<report::Row> first_;
  std::vector<size_t> widths_;
};

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

}  // namespace

int run_query(const std::string& db_path, const std::string& sql_text, std::ostream& out, std::ostream& err,
              const QueryLimits& limits) {
  if (!std::filesystem::exists(db_path)) {  // a FIFO or a directory is refused by name when opened
    err << "ga-run query: " << db_path << ": no such database file\n";
    return 1;
  }
  StreamedTable table(out);
  try {
    const QueryOutcome outcome = run_read_only_query(
        db_path, sql_text, limits, [&](const std::vector<std::string>& names) { table.columns(names); },
        [&](const std::vector<QueryCell>& cells) { table.row(cells); });
    table.flush();
    if (outcome.cut)
      out << "(cut at " << outcome.rows << " rows; --max-rows to see more)\n";
    else
      out << "(" << outcome.rows << (outcome.rows == 1 ? " row)\n" : " rows)\n");
    return 0;
  } catch (const QueryTimedOut& e) {
    table.flush();  // the rows that came before the stop
    out.flush();
    err << "ga-run query: stopped by --timeout " << seconds_text(limits.timeout_seconds) << ": " << e.what()
        << "\n  give it longer with --timeout SECONDS (0: no limit), or narrow the statement (WHERE, LIMIT)\n";
    return 1;
  } catch (const QueryTooLarge& e) {
    table.flush();
    out.flush();
    err << "ga-run query: " << e.what()
        << "\n  narrow the statement (WHERE, LIMIT, substr()) or use the sqlite3 shell for bulk work\n";
    return 1;
  } catch (const sql::SqlError& e) {
    err << "ga-run query: " << e.what() << '\n';
    std::error_code error;
    if (std::filesystem::file_size(db_path, error) == 0 && !error)
      err << "  " << db_path << " is an empty file: it holds no tables (is it the results file you meant?)\n";
    return 1;
  }
}

}  // namespace midtune::cli
