#include "core/report/html_report.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/report/provenance.hpp"
#include "core/report/svg_plot.hpp"
#include "core/report/table.hpp"
#include "core/search/heldout_statistics.hpp"
#include "methods/self_extend.hpp"
#include "methods/string_shift.hpp"

namespace midtune::report {

using nlohmann::json;

namespace {

constexpr const char* kStyle = R"(
body { font-family: sans-serif; max-width: 980px; margin: 24px auto; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ccc; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dt { font-weight: bold; } dd { margin: 0; font-family: monospace; word-break: break-all; }
table { border-collapse: collapse; margin: 8px 0; } td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.verdict { padding: 6px 10px; margin: 4px 0; border-left: 4px solid #999; background: #f7f7f7; }
.verdict.detected { border-color: #2ca02c; background: #eef8ee; }
.note { color: #666; font-style: italic; }
)";

std::string cell(const json& value, int digits = 4) {
  if (value.is_number_float()) return format_number(value.get<double>(), digits);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "-";
  return value.dump();
}

void table(std::ostringstream& out, const std::vector<std::string>& header, const std::vector<Row>& rows,
           const std::string& css_class = "") {
  out << "<table" << (css_class.empty() ? "" : " class=\"" + css_class + "\"") << "><tr>";
  for (const std::string& h : header) out << "<th>" << xml_escape(h) << "</th>";
  out << "</tr>\n";
  for (const Row& row : rows) {
    out << "<tr>";
    for (const std::string& c : row) out << "<td>" << xml_escape(c) << "</td>";
    out << "</tr>\n";
  }
  out << "</table>\n";
}

void fact(std::ostringstream& out, const std::string& name, const std::string& value) {
  out << "<dt>" << xml_escape(name) << "</dt><dd>" << xml_escape(value) << "</dd>\n";
}

void experiment_section(std::ostringstream& out, const json& r) {
  const json& config = r.at("search_config");
  const json dataset = config.value("dataset", json::object());
  const json objective = config.value("objective", json::object());
  const json search = config.value("search", json::object());
  out << "<section id=\"experiment\"><h2>The experiment</h2><dl>\n";
  fact(out, "run on", provenance_text(r.at("provenance")));
  fact(out, "method", objective.value("kind", std::string("?")));
  fact(out, "seed", cell(config.value("seed", json(nullptr))));
  std::string protocol = dataset.value("kind", std::string("?")) + ", metric " +
                         dataset.value("metric", std::string("?")) + ", gold positions " +
                         dataset.value("gold_positions", json::array()).dump() + ", " +
                         cell(dataset.value("search_samples", json(nullptr))) + " search and " +
                         cell(dataset.value("heldout_samples", json(nullptr))) + " held-out items per position";
  fact(out, "protocol", protocol);
  fact(out, "strategy", search.value("strategy", std::string("?")) + " " + search.value(search.value("strategy", std::string()), json::object()).dump());
  if (objective.contains("weights")) fact(out, "fitness weights", objective.at("weights").dump());
  fact(out, "results file", r.value("database", std::string()));
  for (const json& run : r.value("runs", json::array()))
    fact(out, "run " + run.at("run").dump(), run.at("started_at").get<std::string>() + ": " + run_text(run.at("provenance")));
  out << "</dl></section>\n";
}

void answer_section(std::ostringstream& out, const json& r) {
  out << "<section id=\"answer\"><h2>The answer</h2>\n";
  const json& best = r.at("best");
  out << "<p>Best of the search: candidate " << best.at("candidate").get<long long>() << " (generation "
      << best.at("generation").get<int>() << "), search fitness " << cell(best.at("fitness")) << ".</p>\n";
  if (!r.contains("heldout_statistics")) {
    out << "<p class=\"note\">No held-out comparison yet: run the experiment to its end (the held-out step) "
           "or <code>ga-run eval --split heldout</code>.</p>\n";
  } else {
    for (const json& c : r.at("heldout_statistics").at("comparisons"))
      out << "<div class=\"verdict" << (c.value("detected", false) ? " detected" : "") << "\">"
          << xml_escape(c.value("verdict", std::string())) << "</div>\n";
  }
  out << "</section>\n";
}

void fitness_section(std::ostringstream& out, const json& r) {
  out << "<section id=\"fitness\"><h2>Fitness by generation</h2>\n" << fitness_plot_svg(r.at("generations"));
  std::vector<Row> rows;
  for (const json& g : r.at("generations"))
    rows.push_back({cell(g.at("generation")), cell(g.at("best")), cell(g.at("mean")), cell(g.at("population")),
                    cell(g.at("evaluated")), cell(g.at("from_cache")), cell(g.at("raced")),
                    g.value("computed_on", std::string("-"))});
  table(out,
        {"generation", "best", "mean", "population", "evaluated", "from cache", "dropped by racing", "computed on"},
        rows);
  out << "</section>\n";
}

// PI's constant scale, when the held-out step evaluated it.
// A method's layer list as "first-last" (or the list where it has gaps).
std::string layer_span(const json& method) {
  std::vector<int> layers;
  for (const json& l : method.value("layers", json::array()))
    if (l.is_number_integer()) layers.push_back(l.get<int>());
  if (layers.empty()) return "none";
  std::sort(layers.begin(), layers.end());
  if (layers.back() - layers.front() + 1 == static_cast<int>(layers.size())) {
    return std::to_string(layers.front()) + "-" + std::to_string(layers.back());
  }
  std::string out;
  for (int l : layers) {
    if (!out.empty()) out += ',';
    out += std::to_string(l);
  }
  return out;
}

double pi_scale(const json& heldout) {
  for (const json& entry : heldout)
    if (entry.value("role", "") == "pi-mean") {
      const json scales = entry.value("layer_scales", json::array());
      if (scales.size() == 1 && scales[0].is_number()) return scales[0].get<double>();
    }
  return 0.0;
}

void best_section(std::ostringstream& out, const json& r) {
  const json& best = r.at("best");
  const json& intervention = best.at("intervention");
  out << "<section id=\"best\"><h2>The best intervention</h2>\n";
  bool drawn = false;
  std::vector<double> scales;
  for (const json& s : best.value("layer_scales", json::array()))
    if (s.is_number()) scales.push_back(s.get<double>());
  // Each drawing is a div.best-drawing whose data-method names the
  // intervention field it shows, so a reader (and the browser test) can tell
  // which of a combo's methods are drawn.
  if (!scales.empty()) {
    out << "<div class=\"best-drawing\" data-method=\"rope_scale\"><h3>Per-layer RoPE scales"
        << (scales.size() == 1 ? " (one for every layer)" : "") << "</h3>\n"
        << layer_scales_svg(scales, pi_scale(r.at("heldout"))) << "</div>\n";
    drawn = true;
  }
  const json model = r.at("provenance").at("model");
  if (intervention.contains("mspoe")) {
    const json& m = intervention.at("mspoe");
    out << "<div class=\"best-drawing\" data-method=\"mspoe\"><h3>Ms-PoE: per-head ratios from layer "
        << cell(m.value("first_layer", json(nullptr))) << " (order: "
        << xml_escape(m.value("order", std::string("awareness"))) << ")</h3>\n"
        << head_ratios_svg(m.value("min_ratio", 1.0), m.value("max_ratio", 1.0),
                           model.is_object() ? model.value("heads", 1) : 1, m.value("reference_spacing", false))
        << "</div>\n";
    drawn = true;
  }
  if (intervention.contains("attention_temperature")) {
    // t on its layers, 1 (the plain model) on the others.
    const json& t = intervention.at("attention_temperature");
    const int layers = model.is_object() ? model.value("layers", 0) : 0;
    std::vector<double> per_layer(static_cast<std::size_t>(std::max(layers, 1)), 1.0);
    for (const json& l : t.value("layers", json::array())) {
      const int at = l.is_number_integer() ? l.get<int>() : -1;
      if (at >= static_cast<int>(per_layer.size())) per_layer.resize(static_cast<std::size_t>(at) + 1, 1.0);
      if (at >= 0) per_layer[static_cast<std::size_t>(at)] = t.value("temperature", 1.0);
    }
    out << "<div class=\"best-drawing\" data-method=\"attention_temperature\"><h3>Attention temperature per layer "
           "(logits divided by t)</h3>\n"
        << layer_scales_svg(per_layer, 0.0, "temperature t") << "</div>\n";
    drawn = true;
  }
  // SelfExtend and STRING on the distance axis (svg_plot.hpp): far keys at
  // grouped or shifted distances, the window's keys at their own; drawn over
  // a span that shows the window and a good stretch beyond it.
  // The stored JSON read back through the methods' own modules, which also
  // say where the far query sits.
  if (intervention.contains("self_extend")) {
    const json& m = intervention.at("self_extend");
    const SelfExtend se = self_extend_from_json(m);
    out << "<div class=\"best-drawing\" data-method=\"self_extend\"><h3>SelfExtend: group " << se.group
        << ", neighbour window " << se.window << " (layers " << layer_span(m) << ")</h3>\n"
        << distance_map_svg(se.window, se.group, self_extend_query_shift(se), 4 * se.window) << "</div>\n";
    drawn = true;
  }
  if (intervention.contains("string_shift")) {
    const json& m = intervention.at("string_shift");
    const StringShift st = string_shift_from_json(m);
    out << "<div class=\"best-drawing\" data-method=\"string_shift\"><h3>STRING: shift " << st.shift
        << ", local window " << st.window << " (layers " << layer_span(m) << ")</h3>\n"
        << distance_map_svg(st.shift, 1, string_query_shift(st), 2 * st.shift) << "</div>\n";
    drawn = true;
  }
  // SIW, CALIOPE and PHS are a handful of numbers each: one row per number,
  // placed in the range the file searched for that gene.
  const json objective = r.at("search_config").value("objective", json::object());
  for (const auto& [field, method, title] :
       {std::tuple{"siw", "siw", "SIW: first-token attention weights"},
        std::tuple{"position_map", "caliope", "CALIOPE: chunk-wise position ids"},
        std::tuple{"hidden_channel", "phs", "PHS: one hidden-state channel"}}) {
    if (!intervention.contains(field)) continue;
    const json genes = objective.value(method, json::object()).value("genes", json::object());
    std::vector<NamedValue> values;
    std::string settings;  // what is not a number (a layer list, a calibrator's name) titles the rows
    for (const auto& [name, value] : intervention.at(field).items()) {
      if (value.is_number()) {
        NamedValue v{name, value.get<double>(), 0, 0};
        const json gene = genes.value(name, json::object());
        if (gene.contains("min") && gene.contains("max")) {
          v.low = gene.at("min").get<double>();
          v.high = gene.at("max").get<double>();
        } else {
          bool first = true;
          for (const json& x : gene.value("values", json::array()))
            if (x.is_number()) {
              v.low = first ? x.get<double>() : std::min(v.low, x.get<double>());
              v.high = first ? x.get<double>() : std::max(v.high, x.get<double>());
              first = false;
            }
        }
        values.push_back(v);
      } else {
        settings += (settings.empty() ? "" : ", ") + name + " " +
                    (value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
    out << "<div class=\"best-drawing\" data-method=\"" << field << "\"><h3>" << xml_escape(title) << "</h3>\n"
        << value_bars_svg(settings, values) << "</div>\n";
    drawn = true;
  }
  if (!drawn) out << "<p class=\"note\">The plain model (no intervention) scored best.</p>\n";
  out << "<details><summary>The intervention as stored</summary><code>" << xml_escape(intervention.dump())
      << "</code></details></section>\n";
}

void heldout_section(std::ostringstream& out, const json& r) {
  out << "<section id=\"heldout\"><h2>Held-out accuracy by gold position</h2>\n";
  const json& heldout = r.at("heldout");
  if (heldout.empty()) {
    out << "<p class=\"note\">No held-out results yet.</p></section>\n";
    return;
  }
  out << heldout_bands_svg(heldout)
      << "<p class=\"note\">Bands: 95 % Wilson intervals of each role's accuracy at each position.</p>\n";
  std::vector<Row> rows;
  for (const json& entry : heldout)
    for (const json& i : entry.value("intervals", json::array()))
      rows.push_back({entry.value("role", ""),
                      cell(i.at("position"), 3) +
                          (i.contains("realised_position") ? " (at " + cell(i.at("realised_position"), 3) + ")" : ""),
                      format_number(100.0 * i.at("accuracy").get<double>(), 1),
                      format_number(100.0 * i.at("low").get<double>(), 1) + "-" +
                          format_number(100.0 * i.at("high").get<double>(), 1),
                      cell(i.at("correct")) + "/" + cell(i.at("samples"))});
  table(out, {"role", "gold position", "accuracy %", "95 % interval", "correct"}, rows);
  out << "</section>\n";
}

void comparisons_section(std::ostringstream& out, const json& r) {
  out << "<section id=\"comparisons\"><h2>Paired comparisons</h2>\n";
  if (!r.contains("heldout_statistics") || r.at("heldout_statistics").at("comparisons").empty()) {
    out << "<p class=\"note\">No paired comparison: the held-out step has not run.</p></section>\n";
    return;
  }
  const json& statistics = r.at("heldout_statistics");
  out << "<p>The best against every other role, and the paper's default (and PI) against the baseline, on the "
      << "same items: exact McNemar test and a paired bootstrap 95 % interval over "
      << cell(statistics.value("bootstrap_replicates", json(nullptr)))
      << " resamples; points are the first role minus the second.</p>\n";
  std::vector<Row> rows;
  for (const json& c : statistics.at("comparisons")) {
    if (!c.contains("middle")) continue;
    const std::string name = c.at("role").get<std::string>() + " vs " + c.at("against").get<std::string>();
    const json& m = c.at("middle");
    // The paired change in the middle's gold log-probability (teacher-forced rows only).
    std::string logprob = "-";
    if (m.contains("gold_logprob")) {
      const json& g = m.at("gold_logprob");
      logprob = format_number(g.at("mean_difference").get<double>(), 3) + " " +
                format_range(g.at("ci").at(0).get<double>(), g.at("ci").at(1).get<double>(), 3);
    }
    rows.push_back({name, format_number(m.at("difference_points").get<double>(), 1),
                    format_range(m.at("ci_points").at(0).get<double>(), m.at("ci_points").at(1).get<double>(), 1),
                    format_p_value(m.at("mcnemar_p").get<double>()),
                    c.value("detected", false) ? "detected" : "not detected", logprob});
  }
  table(out, {"comparison", "middle (points)", "95 % CI", "McNemar p", "verdict", "middle gold log-p change [95 % CI]"},
        rows);
  out << "</section>\n";
}

void pareto_section(std::ostringstream& out, const json& r) {
  const json& front = r.at("pareto_front");
  if (front.empty()) return;
  const json names = r.at("search_config").value("search", json::object()).value("objectives", json::array());
  // The members the held-out step evaluated are the chosen ones (roles front-<candidate>).
  std::set<long long> held_out;
  for (const json& member : front)
    for (const json& entry : r.at("heldout"))
      if (entry.value("role", "") == "front-" + cell(member.at("candidate")))
        held_out.insert(member.at("candidate").get<long long>());
  out << "<section id=\"pareto\"><h2>Pareto front</h2>\n"
      << pareto_front_svg(front, names.get<std::vector<std::string>>(), "final front (every objective maximised)",
                          held_out);
  std::vector<Row> rows;
  for (const json& member : front) {
    const bool chosen = held_out.count(member.at("candidate").get<long long>()) > 0;
    Row row = {cell(member.at("candidate"))};
    for (const json& name : names) row.push_back(cell(member.at("objectives").value(name.get<std::string>(), json())));
    row.push_back(cell(member.at("fitness")));
    row.push_back(chosen ? "held-out" : "-");
    rows.push_back(row);
  }
  // One column per objective, in the file's order (the plot's axes first).
  std::vector<std::string> header = {"candidate"};
  for (const json& name : names) header.push_back(name.get<std::string>());
  header.insert(header.end(), {"fitness", "chosen"});
  table(out, header, rows);
  out << "</section>\n";
}

}  // namespace

std::string html_report(const json& r) {
  std::ostringstream out;
  const std::string name = r.at("experiment").get<std::string>();
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>midtune: " << xml_escape(name)
      << "</title>\n<style>" << kStyle << "</style></head>\n<body>\n<h1>Experiment " << xml_escape(name) << "</h1>\n";
  experiment_section(out, r);
  answer_section(out, r);
  fitness_section(out, r);
  best_section(out, r);
  heldout_section(out, r);
  comparisons_section(out, r);
  pareto_section(out, r);
  out << "</body></html>\n";
  return out.str();
}

}  // namespace midtune::report
