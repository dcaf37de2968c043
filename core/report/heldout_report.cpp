#include "core/report/heldout_report.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "core/report/svg_plot.hpp"
#include "core/experiment/experiment_name.hpp"
#include "core/search/heldout_statistics.hpp"

namespace midtune::report {

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

namespace {

std::string percent_range(const json& interval) {
  return format_number(100.0 * interval.at("low").get<double>(), 1) + "-" +
         format_number(100.0 * interval.at("high").get<double>(), 1);
}

// The listed gold position, with where the gold actually sat beside it
// when that differs ("0.5 (at 0.556)": the chunk nearest 0.5 of ten).
std::string position_label(const json& p) {
  std::string label = format_number(p.at("position").get<double>(), 3);
  if (p.contains("realised_position"))
    label += " (at " + format_number(p.at("realised_position").get<double>(), 3) + ")";
  return label;
}

std::string points_range(const json& ci) { return format_range(ci.at(0).get<double>(), ci.at(1).get<double>(), 1); }

// "best vs baseline": a comparison's two roles, as every table names it.
std::string comparison_name(const json& c) {
  return c.at("role").get<std::string>() + " vs " + c.at("against").get<std::string>();
}

}  // namespace

void print_heldout_statistics(const json& statistics, std::ostream& out) {
  if (!statistics.is_object()) return;
  out << "\n## 95 % Wilson intervals (%)\n\n";
  Row header = {"gold position"};
  std::map<double, Row> by_position;
  std::map<double, std::string> labels;
  Row pooled = {"all positions"};
  const json& intervals = statistics.at("intervals");
  for (std::size_t r = 0; r < intervals.size(); ++r) {
    header.push_back(intervals[r].at("role").get<std::string>());
    for (const json& p : intervals[r].at("positions")) {
      Row& row = by_position[p.at("position").get<double>()];
      labels[p.at("position").get<double>()] = position_label(p);
      row.resize(intervals.size(), "-");
      row[r] = percent_range(p);
    }
    pooled.push_back(percent_range(intervals[r].at("pooled")));
  }
  std::vector<Row> rows;
  for (auto& [position, cells] : by_position) {
    Row row = {labels.at(position)};
    cells.resize(intervals.size(), "-");
    row.insert(row.end(), cells.begin(), cells.end());
    rows.push_back(row);
  }
  rows.push_back(pooled);
  print_table(out, header, rows);
  if (statistics.contains("logprob_correlation")) {
    out << "\n## Accuracy vs gold log-probability (Pearson r of per-item correctness and log-probability)\n\n";
    rows.clear();
    for (const json& c : statistics.at("logprob_correlation"))
      rows.push_back({c.at("role").get<std::string>(), c.at("samples").dump(),
                      c.at("pearson_r").is_null() ? "-" : format_number(c.at("pearson_r").get<double>(), 3)});
    print_table(out, {"role", "items", "Pearson r"}, rows);
  }
  const json& comparisons = statistics.at("comparisons");
  if (comparisons.empty()) return;
  out << "\n## Paired comparisons (same items; exact McNemar, paired bootstrap 95 % CI over "
      << statistics.at("bootstrap_replicates").dump() << " resamples; points = the first role minus the second)\n\n";
  for (const json& c : comparisons) out << "- " << c.at("verdict").get<std::string>() << '\n';
  out << '\n';
  rows.clear();
  for (const json& c : comparisons) {
    if (!c.contains("positions")) continue;
    const std::string name = comparison_name(c);
    for (const json& p : c.at("positions"))
      rows.push_back({name, position_label(p), format_number(p.at("difference_points").get<double>(), 1),
                      points_range(p.at("ci_points")), p.at("role_only").dump() + " / " + p.at("against_only").dump(),
                      format_p_value(p.at("mcnemar_p").get<double>())});
    const json& m = c.at("middle");
    rows.push_back({name, "middle", format_number(m.at("difference_points").get<double>(), 1),
                    points_range(m.at("ci_points")), m.at("role_only").dump() + " / " + m.at("against_only").dump(),
                    format_p_value(m.at("mcnemar_p").get<double>())});
    if (c.contains("fitness"))
      rows.push_back({name, "fitness (weighted)", format_number(c.at("fitness").at("difference_points").get<double>(), 1),
                      points_range(c.at("fitness").at("ci_points")), "-", "-"});
  }
  print_table(out,
              {"comparison", "gold position", "difference (points)", "95 % CI",
               "items only the first / only the second", "McNemar p"},
              rows);
  rows.clear();
  for (const json& c : comparisons) {
    if (!c.contains("middle") || !c.at("middle").contains("gold_logprob")) continue;
    const json& g = c.at("middle").at("gold_logprob");
    rows.push_back({comparison_name(c), g.at("items").dump(), format_number(g.at("mean_difference").get<double>(), 3),
                    format_range(g.at("ci").at(0).get<double>(), g.at("ci").at(1).get<double>(), 3)});
  }
  if (rows.empty()) return;
  out << "\nThe middle's gold log-probability, paired (teacher-forced; nats, the first role minus the second; it "
         "moves where the answers do not):\n\n";
  print_table(out, {"comparison", "middle items", "mean change", "95 % CI"}, rows);
}

void append_heldout_statistics_csv_rows(const json& statistics, std::vector<Row>& rows) {
  for (const json& r : statistics.at("intervals")) {
    const std::string role = r.at("role").get<std::string>();
    for (const json& p : r.at("positions")) {
      std::string at = "@";  // appended: GCC 12 at -O3 warns falsely (-Wrestrict) on "@" + std::string
      at += format_number(p.at("position").get<double>(), 3);
      rows.push_back({"heldout_interval", role, "low" + at, format_number(p.at("low").get<double>(), 6)});
      rows.push_back({"heldout_interval", role, "high" + at, format_number(p.at("high").get<double>(), 6)});
      if (p.contains("realised_position"))
        rows.push_back({"heldout_interval", role, "realised_position" + at,
                        format_number(p.at("realised_position").get<double>(), 6)});
    }
  }
  for (const json& c : statistics.value("logprob_correlation", json::array()))
    if (!c.at("pearson_r").is_null())
      rows.push_back({"heldout_logprob_correlation", c.at("role").get<std::string>(), "pearson_r",
                      format_number(c.at("pearson_r").get<double>(), 6)});
  for (const json& c : statistics.at("comparisons")) {
    if (!c.contains("middle")) continue;
    const std::string name = comparison_name(c);
    const json& m = c.at("middle");
    rows.push_back({"heldout_comparison", name, "middle_difference_points", format_number(m.at("difference_points").get<double>(), 6)});
    rows.push_back({"heldout_comparison", name, "middle_ci_low", format_number(m.at("ci_points").at(0).get<double>(), 6)});
    rows.push_back({"heldout_comparison", name, "middle_ci_high", format_number(m.at("ci_points").at(1).get<double>(), 6)});
    rows.push_back({"heldout_comparison", name, "middle_mcnemar_p", format_number(m.at("mcnemar_p").get<double>(), 6)});
    rows.push_back({"heldout_comparison", name, "detected", c.at("detected").get<bool>() ? "true" : "false"});
    if (m.contains("gold_logprob")) {
      const json& g = m.at("gold_logprob");
      rows.push_back({"heldout_comparison", name, "middle_gold_logprob_change",
                      format_number(g.at("mean_difference").get<double>(), 6)});
      rows.push_back(
          {"heldout_comparison", name, "middle_gold_logprob_ci_low", format_number(g.at("ci").at(0).get<double>(), 6)});
      rows.push_back({"heldout_comparison", name, "middle_gold_logprob_ci_high",
                      format_number(g.at("ci").at(1).get<double>(), 6)});
    }
  }
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

namespace {

void write_svg(const std::string& path, const std::string& svg) {
  std::ofstream file(path);
  if (!file) throw std::runtime_error(path + ": cannot write the plot");
  file << svg;
  if (!file) throw std::runtime_error(path + ": write failed");
}

}  // namespace

std::string svg_beside(const std::string& db_path, const std::string& experiment, const std::string& kind) {
  // The name comes from the results file, which may predate name checks or
  // come from someone else: it never picks the folder.
  return (std::filesystem::absolute(db_path).parent_path() / (experiment_file_stem(experiment) + "-" + kind + ".svg"))
      .string();
}

void write_heldout_svg(const std::string& path, const std::string& experiment, const json& entries) {
  write_svg(path, heldout_plot_svg(entries, "experiment " + experiment + ": held-out accuracy by gold position"));
}

void write_front_svg(const std::string& path, const std::string& experiment, const json& front,
                     const std::vector<std::string>& objective_names) {
  write_svg(path, pareto_front_svg(front, objective_names, "experiment " + experiment + ": final Pareto front"));
}

}  // namespace midtune::report
