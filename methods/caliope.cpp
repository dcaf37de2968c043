#include "methods/caliope.hpp"

#include <algorithm>
#include <cmath>

#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

namespace check = method_checks;
using nlohmann::json;

void finite(double value, const std::string& field) {
  if (!std::isfinite(value)) check::bad("position_map." + field, "must be finite");
}

std::string calibrator_list() {
  std::string text;
  for (const std::string& kind : caliope_calibrators()) text += (text.empty() ? "" : ", ") + kind;
  return text;
}

std::vector<GeneSchema> genes() {
  const PositionMap paper;
  return {
      {"calibrator", GeneType::categorical, caliope_calibrators().front(), 0, 0, caliope_calibrators(),
       "calibrator kind"},
      {"gap", GeneType::real, paper.gap, 0, 1e6, {}, "Moses: Delta_gap"},
      {"delta_min", GeneType::real, paper.delta_min, 0, 1e6, {}, "hourglass: Delta_min"},
      {"delta_max", GeneType::real, paper.delta_max, 0, 1e6, {}, "hourglass: Delta_max"},
      {"delta0", GeneType::real, paper.delta0, 0, 1e6, {}, "decay: Delta_0"},
      {"lambda", GeneType::real, paper.lambda, 0, 1, {}, "decay: lambda"},
  };
}

}  // namespace

const std::vector<std::string>& caliope_calibrators() {
  static const std::vector<std::string> kinds = {"moses", "hourglass", "decay"};
  return kinds;
}

json position_map_to_json(const PositionMap& p) {
  json pm = {{"kind", p.kind}};
  if (p.kind == "moses") pm["gap"] = p.gap;
  if (p.kind == "hourglass") {
    pm["delta_min"] = p.delta_min;
    pm["delta_max"] = p.delta_max;
  }
  if (p.kind == "decay") {
    pm["delta0"] = p.delta0;
    pm["lambda"] = p.lambda;
  }
  return pm;
}

PositionMap position_map_from_json(const json& m) {
  check::reject_unknown(m, "position_map", {"kind", "gap", "delta_min", "delta_max", "delta0", "lambda"});
  PositionMap p;
  if (!m.contains("kind") || !m["kind"].is_string())
    check::bad("position_map.kind", "missing (" + calibrator_list() + ")");
  p.kind = m["kind"].get<std::string>();
  const auto& kinds = caliope_calibrators();
  if (std::find(kinds.begin(), kinds.end(), p.kind) == kinds.end())
    check::bad("position_map.kind", "'" + p.kind + "' is not one of " + calibrator_list());
  p.gap = check::number(m, "position_map.gap", p.gap);
  p.delta_min = check::number(m, "position_map.delta_min", p.delta_min);
  p.delta_max = check::number(m, "position_map.delta_max", p.delta_max);
  p.delta0 = check::number(m, "position_map.delta0", p.delta0);
  p.lambda = check::number(m, "position_map.lambda", p.lambda);
  return p;
}

void validate_position_map(const PositionMap& map, const ModelShape& /*model*/) {
  const auto bad = [](const std::string& field, const std::string& reason) {
    check::bad("position_map." + field, reason);
  };
  if (map.kind == "moses") {
    finite(map.gap, "gap");
    // The one step is gap: Phi jumps by 1 + gap there (eq. 3).
    if (map.gap <= -1.0) bad("gap", "must be > -1 so that positions keep increasing");
  } else if (map.kind == "hourglass") {
    finite(map.delta_min, "delta_min");
    finite(map.delta_max, "delta_max");
    // Every step of eq. 4 lies between delta_min and delta_max (the parabola is in [0, 1]).
    if (map.delta_min <= -1.0) bad("delta_min", "must be > -1 so that positions keep increasing");
    if (map.delta_max <= -1.0) bad("delta_max", "must be > -1 so that positions keep increasing");
  } else if (map.kind == "decay") {
    finite(map.delta0, "delta0");
    finite(map.lambda, "lambda");
    if (map.lambda < 0.0) bad("lambda", "must be >= 0");
    // Steps of eq. 5 are delta0 lambda^k, k >= 1: bounded below by
    // min(0, delta0 lambda) when lambda <= 1; unbounded below for lambda > 1
    // and delta0 < 0.
    if (map.delta0 < 0.0 && (map.lambda > 1.0 || map.delta0 * map.lambda <= -1.0)) {
      bad("delta0", "a negative delta0 needs lambda <= 1 and delta0 * lambda > -1 so that positions keep increasing");
    }
  } else {
    bad("kind", "'" + map.kind + "' is not one of " + calibrator_list());
  }
}

PositionMap position_map_from_genes(const GeneValues& genes) {
  PositionMap p;
  p.kind = genes.text("calibrator");
  p.gap = genes.number("gap");
  p.delta_min = genes.number("delta_min");
  p.delta_max = genes.number("delta_max");
  p.delta0 = genes.number("delta0");
  p.lambda = genes.number("lambda");
  return p;
}

const MethodModule& caliope_method() {
  static const MethodModule module = optional_field_method<PositionMap>(
      "caliope", "position_map", Mechanism::prompt_positions,
      &Intervention::position_map, genes(), {{"delta_min", "delta_max"}},
      {position_map_to_json, position_map_from_json, validate_position_map, position_map_from_genes},
      PositionMap{.kind = caliope_calibrators().front()});
  return module;
}

}  // namespace midtune
