#include "core/cli/heldout_report.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "core/cli/svg_plot.hpp"

namespace midtune::cli {

using nlohmann::json;

namespace {

std::string column_name(const json& entry) {
  std::string name = entry.value("label", entry.value("role", std::string("?")));
  const json& scales = entry.value("layer_scales", json::array());
  if (entry.value("role", "") == "pi-mean" && scales.size() == 1 && scales[0].is_number())
    name += " (x" + format_number(scales[0].get<double>(), 3) + ")";
  return name;
}

const char* const kSummaryFields[][2] = {{"mean_percent", "mean %"},
                                         {"gap_points", "gap (points)"},
                                         {"std_percent", "std %"},
                                         {"u_shape_covariance", "U-index (cov)"},
                                         {"u_shape_pearson", "Pearson r"}};

}  // namespace

void print_side_by_side(const json& entries, std::ostream& out) {
  Row header = {"gold position"};
  std::map<double, Row> by_position;
  for (std::size_t e = 0; e < entries.size(); ++e) {
    header.push_back(column_name(entries[e]));
    for (const json& p : entries[e].value("position_scores", json::array())) {
      Row& row = by_position[p.at("position").get<double>()];
      row.resize(entries.size(), "-");
      row[e] = format_number(100.0 * p.at("accuracy").get<double>(), 1) + " (" + p.at("correct").dump() + "/" +
               p.at("samples").dump() + ")";
    }
  }
  std::vector<Row> rows;
  for (auto& [position, cells] : by_position) {
    Row row = {format_number(position, 3)};
    cells.resize(entries.size(), "-");
    row.insert(row.end(), cells.begin(), cells.end());
    rows.push_back(row);
  }
  for (const auto& [field, label] : kSummaryFields) {
    Row row = {label};
    for (const json& entry : entries) {
      const json summary = entry.value("summary", json::object());
      row.push_back(summary.contains(field) ? format_number(summary.at(field).get<double>(), 3) : "-");
    }
    rows.push_back(row);
  }
  print_table(out, header, rows);
}

void append_heldout_csv_rows(const json& entries, std::vector<Row>& rows) {
  for (const json& entry : entries) {
    const std::string role = entry.value("role", "");
    for (const json& p : entry.value("position_scores", json::array()))
      rows.push_back({"heldout", role, "accuracy@" + format_number(p.at("position").get<double>(), 3),
                      format_number(p.at("accuracy").get<double>(), 6)});
    for (const auto& [field, label] : kSummaryFields) {
      const json summary = entry.value("summary", json::object());
      if (summary.contains(field))
        rows.push_back({"heldout", role, field, format_number(summary.at(field).get<double>(), 6)});
    }
  }
}

std::string write_heldout_svg(const std::string& db_path, const std::string& experiment, const json& entries) {
  const std::filesystem::path path =
      std::filesystem::absolute(db_path).parent_path() / (experiment + "-heldout.svg");
  std::ofstream file(path);
  if (!file) throw std::runtime_error(path.string() + ": cannot write the plot");
  file << heldout_plot_svg(entries, "experiment " + experiment + ": held-out accuracy by gold position");
  if (!file) throw std::runtime_error(path.string() + ": write failed");
  return path.string();
}

}  // namespace midtune::cli
