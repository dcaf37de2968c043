// Plain-text tables for the terminal (query, status, report --format md).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace midtune::report {

using Row = std::vector<std::string>;

// Markdown-compatible pipe table, columns padded to their widest cell.
void print_table(std::ostream& out, const Row& header, const std::vector<Row>& rows);
// The column widths print_table gives `rows`, and one line of such a table
// (a cell wider than its column widens only its own line): a table printed
// while its rows arrive takes its widths from the first rows.
std::vector<size_t> table_widths(const Row& header, const std::vector<Row>& rows);
void print_table_line(std::ostream& out, const std::vector<size_t>& widths, const Row& row);
void print_table_rule(std::ostream& out, const std::vector<size_t>& widths);
// RFC 4180 CSV (quotes cells holding a comma, quote or newline).
void print_csv(std::ostream& out, const Row& header, const std::vector<Row>& rows);
// Fixed-precision number text, trailing zeros trimmed ("0.5", "1.25").
std::string format_number(double value, int precision = 4);
// An interval as the reports print it: "[-7, 16]" (format_number's text).
std::string format_range(double low, double high, int precision = 1);

}  // namespace midtune::report
