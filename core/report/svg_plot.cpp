#include "core/report/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace midtune::report {

using nlohmann::json;

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

namespace {

// One plotting panel: data ranges mapped into a pixel box.
struct Panel {
  double left, top, width, height;
  double x_min, x_max, y_min, y_max;
  double px(double x) const { return left + (x - x_min) / (x_max - x_min) * width; }
  double py(double y) const { return top + height - (y - y_min) / (y_max - y_min) * height; }
};

std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

std::string escape(const std::string& text) { return xml_escape(text); }

void text(std::ostringstream& svg, double x, double y, const std::string& content, const char* anchor = "middle") {
  svg << "<text x=\"" << number(x) << "\" y=\"" << number(y) << "\" text-anchor=\"" << anchor << "\">"
      << escape(content) << "</text>\n";
}

// Frame, ticks and axis labels.
void axes(std::ostringstream& svg, const Panel& p, const std::vector<double>& x_ticks,
          const std::vector<double>& y_ticks, const std::string& x_label, const std::string& y_label) {
  svg << "<rect x=\"" << number(p.left) << "\" y=\"" << number(p.top) << "\" width=\"" << number(p.width)
      << "\" height=\"" << number(p.height) << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (double x : x_ticks) text(svg, p.px(x), p.top + p.height + 16, number(x));
  for (double y : y_ticks) {
    svg << "<line x1=\"" << number(p.left) << "\" x2=\"" << number(p.left + p.width) << "\" y1=\"" << number(p.py(y))
        << "\" y2=\"" << number(p.py(y)) << "\" stroke=\"#ddd\"/>\n";
    text(svg, p.left - 6, p.py(y) + 4, number(y), "end");
  }
  text(svg, p.left + p.width / 2, p.top + p.height + 34, x_label);
  svg << "<text transform=\"translate(" << number(p.left - 52) << "," << number(p.top + p.height / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">" << escape(y_label) << "</text>\n";
}

void polyline(std::ostringstream& svg, const Panel& p, const std::vector<std::pair<double, double>>& points,
              const char* colour, double width = 2) {
  svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"" << number(width) << "\" points=\"";
  for (const auto& [x, y] : points) svg << number(p.px(x)) << ',' << number(p.py(y)) << ' ';
  svg << "\"/>\n";
  for (const auto& [x, y] : points)
    svg << "<circle cx=\"" << number(p.px(x)) << "\" cy=\"" << number(p.py(y)) << "\" r=\""
        << number(std::max(3.0, width / 2 + 1)) << "\" fill=\"" << colour << "\"/>\n";
}

const char* colour_of(const std::string& role) {
  if (role == "baseline") return "#555555";
  if (role == "pi-mean") return "#1f77b4";
  if (role == "paper-default") return "#2ca02c";
  if (role.rfind("front-", 0) == 0) return "#ff7f0e";  // nsga2 front members
  return "#d62728";  // best
}

std::string open_svg(int width, int height) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
         std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"" +
         std::to_string(width) + "\" height=\"" + std::to_string(height) + "\" fill=\"white\"/>\n";
}

void legend_entry(std::ostringstream& svg, double x, double y, const std::string& label, const char* colour) {
  svg << "<line x1=\"" << number(x) << "\" x2=\"" << number(x + 20) << "\" y1=\"" << number(y) << "\" y2=\""
      << number(y) << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
  text(svg, x + 26, y + 4, label, "start");
}

// Up to about five round ticks from low to high.
std::vector<double> ticks(double low, double high) {
  if (!(high > low)) return {low};
  const double raw = (high - low) / 4.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(low / step) * step; t <= high + 1e-9 * step; t += step)
    out.push_back(std::abs(t) < 1e-9 * step ? 0.0 : t);  // a tick at zero reads "0", never "-0"
  return out;
}

}  // namespace

std::string fitness_plot_svg(const json& generations) {
  std::ostringstream svg;
  svg << open_svg(760, 430);
  double low = INFINITY, high = -INFINITY;
  int last = 0, most = 1;
  for (const json& g : generations) {
    for (const char* field : {"best", "mean"}) {
      low = std::min(low, g.at(field).get<double>());
      high = std::max(high, g.at(field).get<double>());
    }
    last = std::max(last, g.at("generation").get<int>());
    most = std::max(most, g.at("population").get<int>());
  }
  if (!(high > low)) {
    low = std::isfinite(low) ? low - 0.5 : 0.0;
    high = low + 1.0;
  }
  const double pad = 0.05 * (high - low);
  const Panel fitness{80, 20, 580, 220, -0.5, last + 0.5, low - pad, high + pad};
  std::vector<double> generation_ticks;
  for (const double t : ticks(0, std::max(1, last)))
    if (t == std::floor(t) && t <= last) generation_ticks.push_back(t);
  axes(svg, fitness, generation_ticks, ticks(low - pad, high + pad), "generation", "fitness");
  for (const auto& [field, colour] : {std::pair{"mean", "#1f77b4"}, std::pair{"best", "#d62728"}}) {
    std::vector<std::pair<double, double>> points;
    for (const json& g : generations) points.emplace_back(g.at("generation").get<double>(), g.at(field).get<double>());
    svg << "<g class=\"gen-" << field << "-line\">\n";
    svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"";
    for (const auto& [x, y] : points) svg << number(fitness.px(x)) << ',' << number(fitness.py(y)) << ' ';
    svg << "\"/>\n";
    for (const json& g : generations)
      svg << "<circle class=\"gen-" << field << "\" data-generation=\"" << g.at("generation").get<int>()
          << "\" cx=\"" << number(fitness.px(g.at("generation").get<double>())) << "\" cy=\""
          << number(fitness.py(g.at(field).get<double>())) << "\" r=\"3.5\" fill=\"" << colour << "\"/>\n";
    svg << "</g>\n";
  }
  legend_entry(svg, fitness.left + fitness.width + 10, fitness.top + 14, "best", "#d62728");
  legend_entry(svg, fitness.left + fitness.width + 10, fitness.top + 30, "mean", "#1f77b4");

  // How each generation's candidates were scored, stacked.
  const Panel counts{80, 290, 580, 90, -0.5, last + 0.5, 0, static_cast<double>(most)};
  axes(svg, counts, generation_ticks, {0, static_cast<double>(most)}, "", "candidates");
  const double bar = std::min(30.0, 0.6 * counts.width / (last + 1));
  const std::vector<std::pair<const char*, const char*>> parts = {
      {"evaluated", "#1f77b4"}, {"from_cache", "#2ca02c"}, {"raced", "#ff7f0e"}};
  for (const json& g : generations) {
    double base = 0;
    for (const auto& [field, colour] : parts) {
      // "evaluated" counts the candidates racing dropped too (their
      // evaluation ran, on a slice): the blue part is the rest, so the
      // stack adds up to the population.
      const double n = std::string(field) == "evaluated" ? g.value(field, 0) - g.value("raced", 0) : g.value(field, 0);
      if (n <= 0) continue;
      const double x = counts.px(g.at("generation").get<double>()) - bar / 2;
      svg << "<rect class=\"gen-" << field << "\" data-generation=\"" << g.at("generation").get<int>()
          << "\" x=\"" << number(x) << "\" y=\"" << number(counts.py(base + n)) << "\" width=\"" << number(bar)
          << "\" height=\"" << number(counts.py(base) - counts.py(base + n)) << "\" fill=\"" << colour << "\"/>\n";
      base += n;
    }
  }
  double x = counts.left;
  for (const auto& [label, colour] : {std::pair{"evaluated in full", "#1f77b4"}, std::pair{"from cache", "#2ca02c"},
                                      std::pair{"dropped by racing", "#ff7f0e"}}) {
    svg << "<rect x=\"" << number(x) << "\" y=\"406\" width=\"12\" height=\"12\" fill=\"" << colour << "\"/>\n";
    text(svg, x + 18, 416, label, "start");
    x += 150;
  }
  svg << "</svg>\n";
  return svg.str();
}

namespace {

// Each role's colour in the held-out plot: colour_of(), except that the
// front members of a Pareto search get one colour each, in their order,
// so that their lines can be told apart.
std::map<std::string, const char*> heldout_colours(const json& heldout) {
  static const char* const kFrontPalette[] = {"#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"};
  std::map<std::string, const char*> out;
  std::size_t front = 0;
  for (const json& entry : heldout) {
    const std::string role = entry.value("role", "");
    out[role] = role.rfind("front-", 0) == 0 ? kFrontPalette[front++ % std::size(kFrontPalette)] : colour_of(role);
  }
  return out;
}

}  // namespace

std::string heldout_bands_svg(const json& heldout) {
  const std::map<std::string, const char*> colours = heldout_colours(heldout);
  std::ostringstream svg;
  svg << open_svg(620, 400);
  const Panel accuracy{80, 20, 380, 300, 0.0, 1.0, 0.0, 100.0};
  axes(svg, accuracy, {0, 0.25, 0.5, 0.75, 1}, {0, 25, 50, 75, 100}, "gold position (fraction of the context)",
       "accuracy (%)");
  for (const json& entry : heldout) {
    const std::string role = entry.value("role", "");
    const char* colour = colours.at(role);
    const json intervals = entry.value("intervals", json::array());
    // The band: the upper ends left to right, the lower ones back. A Pareto
    // front's members get lines only: a band each would hide the others.
    if (!intervals.empty() && role.rfind("front-", 0) != 0) {
      svg << "<polygon class=\"role-band\" data-role=\"" << escape(role) << "\" fill=\"" << colour
          << "\" opacity=\"0.15\" points=\"";
      for (const json& i : intervals)
        svg << number(accuracy.px(i.at("position").get<double>())) << ','
            << number(accuracy.py(100.0 * i.at("high").get<double>())) << ' ';
      for (auto i = intervals.rbegin(); i != intervals.rend(); ++i)
        svg << number(accuracy.px(i->at("position").get<double>())) << ','
            << number(accuracy.py(100.0 * i->at("low").get<double>())) << ' ';
      svg << "\"/>\n";
    }
  }
  // Lines over all bands, the first role widest: roles with equal
  // accuracies (often the baseline and a no-op default) show as nested
  // stripes instead of the last one hiding the others.
  double legend_y = accuracy.top + 10, width = 2 + 3 * std::min<double>(3, heldout.size() - 1);
  for (const json& entry : heldout) {
    const std::string role = entry.value("role", "");
    std::vector<std::pair<double, double>> points;
    for (const json& p : entry.value("position_scores", json::array()))
      points.emplace_back(p.at("position").get<double>(), 100.0 * p.at("accuracy").get<double>());
    if (points.empty()) continue;
    svg << "<g class=\"role-line\" data-role=\"" << escape(role) << "\">\n";
    polyline(svg, accuracy, points, colours.at(role), width);
    svg << "</g>\n";
    legend_entry(svg, accuracy.left + accuracy.width + 20, legend_y, role, colours.at(role));
    legend_y += 18;
    width = std::max(2.0, width - 3);
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string layer_scales_svg(const std::vector<double>& scales, double pi, const std::string& value_name) {
  std::ostringstream svg;
  svg << open_svg(620, 330);
  double high = std::max(1.2, pi);
  for (double s : scales) high = std::max(high, s);
  double low = 1.0;
  for (double s : scales) low = std::min(low, s);
  const double layers = static_cast<double>(std::max<std::size_t>(scales.size(), 2));
  const Panel curve{80, 20, 380, 240, 0.0, layers - 1, low, high + 0.05 * (high - low)};
  axes(svg, curve, ticks(0, layers - 1), ticks(curve.y_min, curve.y_max), "layer", value_name);
  std::vector<std::pair<double, double>> points;
  for (std::size_t l = 0; l < scales.size(); ++l) points.emplace_back(static_cast<double>(l), scales[l]);
  if (points.size() == 1) points.emplace_back(layers - 1, scales[0]);  // one scale for every layer
  svg << "<g class=\"best-scales\">\n";
  if (!points.empty()) polyline(svg, curve, points, colour_of("best"));
  svg << "</g>\n";
  legend_entry(svg, curve.left + curve.width + 20, curve.top + 10, "best", colour_of("best"));
  if (pi > 0) {
    svg << "<line class=\"pi-scale\" x1=\"" << number(curve.px(0)) << "\" x2=\"" << number(curve.px(layers - 1))
        << "\" y1=\"" << number(curve.py(pi)) << "\" y2=\"" << number(curve.py(pi)) << "\" stroke=\""
        << colour_of("pi-mean") << "\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n";
    legend_entry(svg, curve.left + curve.width + 20, curve.top + 28, "PI x" + number(pi), colour_of("pi-mean"));
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string distance_map_svg(int near_window, int group, double query_shift, int span) {
  std::ostringstream svg;
  svg << open_svg(620, 330);
  const int last = std::max(span - 1, 1), g = std::max(group, 1);
  const Panel panel{80, 20, 380, 240, 0.0, static_cast<double>(last), 0.0, static_cast<double>(last)};
  axes(svg, panel, ticks(0, last), ticks(0, last), "key's distance from the query (tokens)", "distance seen");
  std::vector<std::pair<double, double>> seen, plain;
  // One point (and marker) per distance would be thousands: about a
  // hundred, and both sides of the window's edge, where the jump is.
  const int step = std::max(1, last / 100);
  std::vector<int> distances;
  for (int d = 0; d <= last; d += step) distances.push_back(d);
  for (const int d : {near_window - 1, near_window})
    if (d >= 0 && d <= last) distances.push_back(d);
  std::sort(distances.begin(), distances.end());
  distances.erase(std::unique(distances.begin(), distances.end()), distances.end());
  for (const int d : distances) {
    const int j = last - d;
    const double far = std::floor(static_cast<double>(last) / g) + query_shift - std::floor(static_cast<double>(j) / g);
    seen.emplace_back(d, d < near_window ? d : far);
    plain.emplace_back(d, d);
  }
  svg << "<g class=\"plain-distances\">\n";
  polyline(svg, panel, plain, colour_of("baseline"));
  svg << "</g>\n<g class=\"remapped-distances\">\n";
  polyline(svg, panel, seen, colour_of("best"));
  svg << "</g>\n";
  legend_entry(svg, panel.left + panel.width + 20, panel.top + 10, "remapped", colour_of("best"));
  legend_entry(svg, panel.left + panel.width + 20, panel.top + 28, "plain", colour_of("baseline"));
  if (near_window > 0 && near_window <= last) {
    svg << "<line class=\"near-window\" x1=\"" << number(panel.px(near_window)) << "\" x2=\""
        << number(panel.px(near_window)) << "\" y1=\"" << number(panel.py(0)) << "\" y2=\"" << number(panel.py(last))
        << "\" stroke=\"" << colour_of("pi-mean") << "\" stroke-dasharray=\"6 4\"/>\n";
    legend_entry(svg, panel.left + panel.width + 20, panel.top + 46, "far from " + std::to_string(near_window),
                 colour_of("pi-mean"));
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string head_ratios_svg(double min_ratio, double max_ratio, int heads, bool reference_spacing) {
  std::ostringstream svg;
  svg << open_svg(620, 330);
  const int n = std::max(heads, 1);
  const Panel panel{80, 20, 380, 240, 0.0, static_cast<double>(std::max(n - 1, 1)), std::min(1.0, min_ratio),
                    max_ratio + 0.05 * std::max(max_ratio - min_ratio, 0.1)};
  axes(svg, panel, ticks(0, std::max(n - 1, 1)), ticks(panel.y_min, panel.y_max),
       "head, in the order the engine assigns ratios", "RoPE ratio");
  std::vector<std::pair<double, double>> points;
  for (int i = 0; i < n; ++i) {
    // Ms-PoE sec. 3.2: min + i (max - min) / (H - 1); its reference code: min + i (max - min) / H.
    const double step = reference_spacing ? n : std::max(n - 1, 1);
    points.emplace_back(i, min_ratio + i * (max_ratio - min_ratio) / step);
  }
  svg << "<g class=\"head-ratios\">\n";
  polyline(svg, panel, points, colour_of("best"));
  svg << "</g>\n</svg>\n";
  return svg.str();
}

std::string value_bars_svg(const std::string& title, const std::vector<NamedValue>& values) {
  std::ostringstream svg;
  const int height = 40 + 26 * static_cast<int>(values.size());
  svg << open_svg(620, height);
  text(svg, 310, 18, title);
  // A searched value is a marker on its range's track (left: the range's
  // minimum, right: its maximum), so values of different units (a channel
  // index beside a scale) never share one axis; a fixed one is text.
  double y = 34;
  for (const NamedValue& v : values) {
    text(svg, 170, y + 13, v.name, "end");
    if (v.high > v.low) {
      const double at = 180 + 300 * std::clamp((v.value - v.low) / (v.high - v.low), 0.0, 1.0);
      svg << "<rect x=\"180\" y=\"" << number(y + 6) << "\" width=\"300\" height=\"6\" fill=\"#ddd\"/>\n"
          << "<rect class=\"value-bar\" x=\"180\" y=\"" << number(y + 6) << "\" width=\"" << number(at - 180)
          << "\" height=\"6\" fill=\"" << colour_of("best") << "\" opacity=\"0.5\"/>\n"
          << "<circle cx=\"" << number(at) << "\" cy=\"" << number(y + 9) << "\" r=\"6\" fill=\"" << colour_of("best")
          << "\"/>\n";
      text(svg, 490, y + 13, number(v.value) + "  (" + number(v.low) + " to " + number(v.high) + ")", "start");
    } else {
      text(svg, 180, y + 13, number(v.value) + "  (fixed)", "start");
    }
    y += 26;
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string heldout_plot_svg(const json& heldout, const std::string& title) {
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"380\" font-family=\"sans-serif\" "
         "font-size=\"12\">\n<rect width=\"900\" height=\"380\" fill=\"white\"/>\n";
  text(svg, 450, 22, title);

  const Panel accuracy{70, 50, 340, 260, 0.0, 1.0, 0.0, 100.0};
  axes(svg, accuracy, {0, 0.25, 0.5, 0.75, 1}, {0, 25, 50, 75, 100}, "gold position (fraction of the context)",
       "accuracy (%)");
  double legend_y = 60;
  const json* best = nullptr;
  int entry_index = 0;
  for (const json& entry : heldout) {
    const std::string role = entry.value("role", "");
    if (role == "best") best = &entry;
    std::vector<std::pair<double, double>> points;
    for (const json& p : entry.value("position_scores", json::array()))
      points.emplace_back(p.at("position").get<double>(), 100.0 * p.at("accuracy").get<double>());
    if (points.empty()) continue;
    polyline(svg, accuracy, points, colour_of(role));
    // Error bars: the 95 % Wilson interval of each point, shifted a little per
    // role so that the bars of equal accuracies stay apart.
    const double shift = 4.0 * (entry_index++ - 0.5 * (static_cast<double>(heldout.size()) - 1.0));
    for (const json& i : entry.value("intervals", json::array())) {
      const double x = accuracy.px(i.at("position").get<double>()) + shift;
      const double low = accuracy.py(100.0 * i.at("low").get<double>());
      const double high = accuracy.py(100.0 * i.at("high").get<double>());
      svg << "<line x1=\"" << number(x) << "\" x2=\"" << number(x) << "\" y1=\"" << number(low) << "\" y2=\""
          << number(high) << "\" stroke=\"" << colour_of(role) << "\" stroke-width=\"1\" opacity=\"0.7\"/>\n";
    }
    svg << "<line x1=\"" << number(accuracy.left + 10) << "\" x2=\"" << number(accuracy.left + 30) << "\" y1=\""
        << number(legend_y) << "\" y2=\"" << number(legend_y) << "\" stroke=\"" << colour_of(role)
        << "\" stroke-width=\"2\"/>\n";
    text(svg, accuracy.left + 36, legend_y + 4, role, "start");
    legend_y += 16;
  }

  std::vector<double> scales;
  if (best)
    for (const json& s : best->value("layer_scales", json::array()))
      if (s.is_number()) scales.push_back(s.get<double>());
  double y_max = 2.0;
  for (double s : scales) y_max = std::max(y_max, s);
  const double layers = static_cast<double>(std::max<std::size_t>(scales.size(), 2));
  const Panel curve{520, 50, 340, 260, 0.0, layers - 1, 1.0, y_max};
  std::vector<double> layer_ticks = {0, layers - 1};
  if (layers > 4) layer_ticks.insert(layer_ticks.begin() + 1, std::floor((layers - 1) / 2));
  axes(svg, curve, layer_ticks, {1.0, (1.0 + y_max) / 2, y_max}, "layer", "RoPE scale (best)");
  if (scales.size() == 1) scales = {scales.front(), scales.front()};  // PI: one scale for every layer
  std::vector<std::pair<double, double>> points;
  for (std::size_t l = 0; l < scales.size(); ++l) points.emplace_back(static_cast<double>(l), scales[l]);
  if (!points.empty()) polyline(svg, curve, points, colour_of("best"));
  svg << "</svg>\n";
  return svg.str();
}

std::string pareto_front_svg(const json& front, const std::vector<std::string>& objective_names,
                             const std::string& title, const std::set<long long>& held_out) {
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"520\" height=\"400\" font-family=\"sans-serif\" "
         "font-size=\"12\">\n<rect width=\"520\" height=\"400\" fill=\"white\"/>\n";
  text(svg, 260, 22, title);
  std::vector<std::pair<double, double>> points;
  std::vector<long long> candidates;  // in front order, beside `members`
  std::vector<std::pair<double, double>> members;
  if (objective_names.size() >= 2)
    for (const json& member : front) {
      const json& o = member.at("objectives");
      if (o.contains(objective_names[0]) && o.contains(objective_names[1])) {
        points.emplace_back(o.at(objective_names[0]).get<double>(), o.at(objective_names[1]).get<double>());
        members.push_back(points.back());
        candidates.push_back(member.value("candidate", -1LL));
      }
    }
  std::sort(points.begin(), points.end());
  // Ranges padded by 5 % (a single point gets a unit range around it).
  const auto range = [&](auto get) {
    double low = INFINITY, high = -INFINITY;
    for (const auto& p : points) {
      low = std::min(low, get(p));
      high = std::max(high, get(p));
    }
    if (points.empty()) return std::pair{0.0, 1.0};
    const double pad = high > low ? 0.05 * (high - low) : 0.5;
    return std::pair{low - pad, high + pad};
  };
  const auto [x_min, x_max] = range([](const auto& p) { return p.first; });
  const auto [y_min, y_max] = range([](const auto& p) { return p.second; });
  const Panel panel{110, 50, 370, 290, x_min, x_max, y_min, y_max};  // room for long tick labels
  axes(svg, panel, {x_min, (x_min + x_max) / 2, x_max}, {y_min, (y_min + y_max) / 2, y_max},
       objective_names.size() >= 1 ? objective_names[0] : "", objective_names.size() >= 2 ? objective_names[1] : "");
  if (!points.empty()) polyline(svg, panel, points, colour_of("front-"));
  // One marker per member (members with equal objectives share a spot); the
  // ones the held-out step evaluated are ringed.
  for (std::size_t i = 0; i < members.size(); ++i) {
    const bool chosen = held_out.count(candidates[i]) > 0;
    svg << "<circle class=\"front-point" << (chosen ? " held-out" : "") << "\" data-candidate=\"" << candidates[i]
        << "\" cx=\"" << number(panel.px(members[i].first)) << "\" cy=\"" << number(panel.py(members[i].second))
        << "\" r=\"" << (chosen ? 7 : 4) << "\" fill=\"" << colour_of("front-") << "\""
        << (chosen ? " stroke=\"#222\" stroke-width=\"2\"" : "") << "/>\n";
  }
  if (!held_out.empty()) {
    svg << "<circle cx=\"290\" cy=\"38\" r=\"5\" fill=\"" << colour_of("front-")
        << "\" stroke=\"#222\" stroke-width=\"2\"/>\n";
    text(svg, 300, 42, "evaluated on the held-out split", "start");
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace midtune::report
