// A hand-written SVG of a held-out report: accuracy by gold
// position for each evaluated role (baseline, PI at the mean scale, the
// search's best) and the best curve's per-layer RoPE scales.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace midtune::cli {

// `heldout` is heldout_json()'s array; `title` goes on top. Roles without
// position scores are skipped; a best without per-layer scales draws the
// right panel empty.
std::string heldout_plot_svg(const nlohmann::json& heldout, const std::string& title);

// The final Pareto front of an nsga2 search (build_report()'s
// "pareto_front"): its members in the plane of the first two objectives
// (in `objective_names` order), joined in order of the first; a third
// objective is left to the report's table.
std::string pareto_front_svg(const nlohmann::json& front, const std::vector<std::string>& objective_names,
                             const std::string& title);

}  // namespace midtune::cli
