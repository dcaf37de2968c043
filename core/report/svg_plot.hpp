// A hand-written SVG of a held-out report: accuracy by gold
// position for each evaluated role (baseline, PI at the mean scale, the
// search's best) and the best curve's per-layer RoPE scales.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace midtune::report {

// `text` with <, >, & and " as entities: safe in SVG/HTML text and attributes.
std::string xml_escape(const std::string& text);

// `heldout` is heldout_json()'s array; `title` goes on top. Roles without
// position scores are skipped; a best without per-layer scales draws the
// right panel empty.
std::string heldout_plot_svg(const nlohmann::json& heldout, const std::string& title);

// The final Pareto front of an nsga2 search (build_report()'s
// "pareto_front"): its members in the plane of the first two objectives
// (in `objective_names` order), joined in order of the first; a third
// objective is left to the report's table. Each member is a circle
// class="front-point" with data-candidate; those in `held_out` (the
// candidates the held-out step evaluated) are ringed and add " held-out".
std::string pareto_front_svg(const nlohmann::json& front, const std::vector<std::string>& objective_names,
                             const std::string& title, const std::set<long long>& held_out = {});

// --- the HTML report's plots (core/report/html_report.hpp) ---

// Best and mean fitness per generation (build_report()'s "generations"),
// and below them how each generation's candidates were scored: evaluated,
// from the cache, dropped by racing. Each point carries
// class="gen-best"/"gen-mean" and data-generation.
std::string fitness_plot_svg(const nlohmann::json& generations);

// Held-out accuracy by gold position for each role, with its 95 % Wilson
// interval drawn as a band (heldout_json() entries with "intervals").
// Each role's line carries class="role-line" and data-role.
std::string heldout_bands_svg(const nlohmann::json& heldout);

// A per-layer curve (RoPE scales; an attention temperature's t) beside a
// constant (PI's scale); `pi` <= 0: none drawn. `value_name` labels the axis.
std::string layer_scales_svg(const std::vector<double>& scales, double pi,
                             const std::string& value_name = "RoPE scale");

// Ms-PoE's per-head ratios from min to max over `heads` heads (the order in
// which heads receive them is decided per prompt by the engine).
std::string head_ratios_svg(double min_ratio, double max_ratio, int heads, bool reference_spacing);

// A remapped attention (SelfExtend, STRING) on the distance axis: the
// relative position the last query of a `span`-token prompt sees each key
// at, against the key's true distance d: d itself below `near_window`, the
// far query and key positions' difference from there, floor(i / group) +
// query_shift - floor(j / group) with i = span - 1, j = i - d. The plain
// model's identity drawn beside it.
std::string distance_map_svg(int near_window, int group, double query_shift, int span);

// One row per named value (SIW's alphas, CALIOPE's gaps, PHS's channel and
// scale): where the value lies in the range the search drew it from
// (low..high), or the bare value when the gene was fixed (low == high).
struct NamedValue {
  std::string name;
  double value = 0, low = 0, high = 0;
};
std::string value_bars_svg(const std::string& title, const std::vector<NamedValue>& values);

}  // namespace midtune::report
