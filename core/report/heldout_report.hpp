// Rendering of held-out results (heldout_json()) for `ga-run report` and
// `ga-run eval`: the roles side by side per gold position, their summaries
// (mean, gap, std, U-shape covariance with Pearson r), CSV rows, the SVG.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report/table.hpp"

namespace midtune::report {

// Columns: one per entry, named by its role (or `label`), accuracy in %.
void print_side_by_side(const nlohmann::json& entries, std::ostream& out);
// The 95 % Wilson intervals per role and position, and one verdict line
// plus a per-position table for each paired comparison (heldout_statistics()).
void print_heldout_statistics(const nlohmann::json& statistics, std::ostream& out);
// Long-form CSV rows {section "heldout_interval" | "heldout_comparison", ...}.
void append_heldout_statistics_csv_rows(const nlohmann::json& statistics, std::vector<Row>& rows);
// Long-form CSV rows {section "heldout", role, field, value}.
void append_heldout_csv_rows(const nlohmann::json& entries, std::vector<Row>& rows);
// `<db folder>/<experiment>-<kind>.svg`, where `report` puts a plot by
// default (kind: heldout, front).
std::string svg_beside(const std::string& db_path, const std::string& experiment, const std::string& kind);
// Writes heldout_plot_svg() to `path`; throws std::runtime_error naming it.
void write_heldout_svg(const std::string& path, const std::string& experiment, const nlohmann::json& entries);
// Writes pareto_front_svg() to `path`; throws std::runtime_error naming it.
void write_front_svg(const std::string& path, const std::string& experiment, const nlohmann::json& front,
                     const std::vector<std::string>& objective_names);

}  // namespace midtune::report
