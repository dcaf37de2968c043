#include "methods/lpes.hpp"

#include <cmath>

#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

namespace check = method_checks;
using nlohmann::json;

std::string row_field(std::size_t layer) { return "rope_scale[" + std::to_string(layer) + "]"; }

}  // namespace

double rope_scale_at(const RopeScale& rope_scale, int layer, int head) {
  if (rope_scale.empty()) return 1.0;
  const auto& row = rope_scale.size() == 1 ? rope_scale[0] : rope_scale.at(static_cast<std::size_t>(layer));
  if (row.size() == 1) return row[0];
  return row.at(static_cast<std::size_t>(head));
}

std::vector<float> rope_scales_per_head(const RopeScale& rope_scale, int layers, int heads) {
  std::vector<float> out(static_cast<std::size_t>(layers) * static_cast<std::size_t>(heads));
  for (int l = 0; l < layers; ++l) {
    for (int h = 0; h < heads; ++h) {
      out[static_cast<std::size_t>(l) * heads + h] = static_cast<float>(rope_scale_at(rope_scale, l, h));
    }
  }
  return out;
}

json rope_scale_to_json(const RopeScale& rope_scale) { return rope_scale; }

RopeScale rope_scale_from_json(const json& rs) {
  if (!rs.is_array()) check::bad("rope_scale", "must be a list of per-layer lists");
  RopeScale out;
  for (std::size_t l = 0; l < rs.size(); ++l) {
    if (!rs[l].is_array() || rs[l].empty()) check::bad(row_field(l), "must be a non-empty list of scales");
    std::vector<double> row;
    for (const json& v : rs[l]) {
      if (!v.is_number()) check::bad(row_field(l), "scales must be numbers");
      check::check_scale(v.get<double>(), row_field(l));
      row.push_back(v.get<double>());
    }
    out.push_back(std::move(row));
  }
  return out;
}

void validate_rope_scale(const RopeScale& rope_scale, const ModelShape& model) {
  for (std::size_t l = 0; l < rope_scale.size(); ++l) {
    const auto& row = rope_scale[l];
    if (row.size() != 1 && static_cast<int>(row.size()) != model.heads) {
      check::bad(row_field(l), std::to_string(row.size()) + " values for " + std::to_string(model.heads) +
                                   " heads (give 1 or one per head)");
    }
    for (double s : row) check::check_scale(s, row_field(l));
  }
  // One value for everything (PI), or one row per layer (LPES); a single row
  // of per-head values only fits a one-layer model.
  const bool everywhere = rope_scale.size() == 1 && rope_scale[0].size() == 1;
  if (!rope_scale.empty() && !everywhere && static_cast<int>(rope_scale.size()) != model.layers) {
    check::bad("rope_scale", std::to_string(rope_scale.size()) + " rows for a model with " +
                                 std::to_string(model.layers) +
                                 " layers (give 1 row with 1 value, or one row per layer)");
  }
}

RopeScale rope_scale_per_layer(const std::vector<double>& layer_scales) {
  RopeScale out;
  for (double scale : layer_scales) out.push_back({scale});
  return out;
}

const MethodModule& lpes_method() {
  static const MethodModule module{
      .name = "lpes",
      .field = "rope_scale",
      .mechanism = Mechanism::layer_rope_scales,
      .genes = {},
      .orders = {},
      .is_set = [](const Intervention& iv) { return !iv.rope_scale.empty(); },
      .write_json = [](const Intervention& iv, json& out) { out["rope_scale"] = rope_scale_to_json(iv.rope_scale); },
      .read_json = [](const json& value, Intervention& out) { out.rope_scale = rope_scale_from_json(value); },
      .validate = [](const Intervention& iv, const ModelShape& model) { validate_rope_scale(iv.rope_scale, model); },
      .copy_field = [](const Intervention& from, Intervention& to) { to.rope_scale = from.rope_scale; },
      .set_probe = [](Intervention& iv) { iv.rope_scale = {{1.5}}; },
      .apply_genes = nullptr,  // the Bézier genome decodes through rope_scale_per_layer()
  };
  return module;
}

}  // namespace midtune
