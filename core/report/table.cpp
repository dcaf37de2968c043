#include "core/report/table.hpp"

#include <algorithm>
#include <cstdio>

namespace midtune::report {

std::vector<size_t> table_widths(const Row& header, const std::vector<Row>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = std::max<size_t>(3, header[c].size());
  for (const Row& row : rows)
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  return width;
}

void print_table_line(std::ostream& out, const std::vector<size_t>& widths, const Row& row) {
  out << '|';
  for (size_t c = 0; c < widths.size(); ++c) {
    const std::string cell = c < row.size() ? row[c] : "";
    out << ' ' << cell << std::string(widths[c] - std::min(widths[c], cell.size()), ' ') << " |";
  }
  out << '\n';
}

void print_table_rule(std::ostream& out, const std::vector<size_t>& widths) {
  out << '|';
  for (size_t w : widths) out << std::string(w + 2, '-') << '|';
  out << '\n';
}

void print_table(std::ostream& out, const Row& header, const std::vector<Row>& rows) {
  const std::vector<size_t> widths = table_widths(header, rows);
  print_table_line(out, widths, header);
  print_table_rule(out, widths);
  for (const Row& row : rows) print_table_line(out, widths, row);
}

namespace {
std::string csv_cell(const std::string& cell) {
  if (cell.find_first_of(",\"\n\r") == std::string::npos) return cell;
  std::string quoted = "\"";
  for (char ch : cell) {
    if (ch == '"') quoted += '"';
    quoted += ch;
  }
  return quoted + '"';
}
}  // namespace

void print_csv(std::ostream& out, const Row& header, const std::vector<Row>& rows) {
  auto line = [&](const Row& row) {
    for (size_t c = 0; c < row.size(); ++c) out << (c ? "," : "") << csv_cell(row[c]);
    out << '\n';
  };
  line(header);
  for (const Row& row : rows) line(row);
}

std::string format_number(double value, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, value);
  std::string text = buf;
  if (text.find('.') != std::string::npos) {
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
  }
  return text == "-0" ? "0" : text;
}

// Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on
// "[" + std::string.
std::string format_range(double low, double high, int precision) {
  std::string range = "[";
  range += format_number(low, precision);
  range += ", ";
  range += format_number(high, precision);
  range += "]";
  return range;
}

}  // namespace midtune::report
