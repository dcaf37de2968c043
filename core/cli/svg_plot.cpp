#include "core/cli/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace midtune::cli {

using nlohmann::json;

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

std::string escape(const std::string& text) {
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
  svg << "<text transform=\"translate(" << number(p.left - 40) << "," << number(p.top + p.height / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">" << escape(y_label) << "</text>\n";
}

void polyline(std::ostringstream& svg, const Panel& p, const std::vector<std::pair<double, double>>& points,
              const char* colour) {
  svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"";
  for (const auto& [x, y] : points) svg << number(p.px(x)) << ',' << number(p.py(y)) << ' ';
  svg << "\"/>\n";
  for (const auto& [x, y] : points)
    svg << "<circle cx=\"" << number(p.px(x)) << "\" cy=\"" << number(p.py(y)) << "\" r=\"3\" fill=\"" << colour
        << "\"/>\n";
}

const char* colour_of(const std::string& role) {
  if (role == "baseline") return "#555555";
  if (role == "pi-mean") return "#1f77b4";
  if (role == "paper-default") return "#2ca02c";
  if (role.rfind("front-", 0) == 0) return "#ff7f0e";  // nsga2 front members
  return "#d62728";  // best
}

}  // namespace

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
  if (scales.size() == 1) scales.push_back(scales.front());  // PI: one scale for every layer
  std::vector<std::pair<double, double>> points;
  for (std::size_t l = 0; l < scales.size(); ++l) points.emplace_back(static_cast<double>(l), scales[l]);
  if (!points.empty()) polyline(svg, curve, points, colour_of("best"));
  svg << "</svg>\n";
  return svg.str();
}

std::string pareto_front_svg(const json& front, const std::vector<std::string>& objective_names,
                             const std::string& title) {
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"520\" height=\"400\" font-family=\"sans-serif\" "
         "font-size=\"12\">\n<rect width=\"520\" height=\"400\" fill=\"white\"/>\n";
  text(svg, 260, 22, title);
  std::vector<std::pair<double, double>> points;
  if (objective_names.size() >= 2)
    for (const json& member : front) {
      const json& o = member.at("objectives");
      if (o.contains(objective_names[0]) && o.contains(objective_names[1]))
        points.emplace_back(o.at(objective_names[0]).get<double>(), o.at(objective_names[1]).get<double>());
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
  const Panel panel{90, 50, 390, 290, x_min, x_max, y_min, y_max};
  axes(svg, panel, {x_min, (x_min + x_max) / 2, x_max}, {y_min, (y_min + y_max) / 2, y_max},
       objective_names.size() >= 1 ? objective_names[0] : "", objective_names.size() >= 2 ? objective_names[1] : "");
  if (!points.empty()) polyline(svg, panel, points, colour_of("front-"));
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace midtune::cli
