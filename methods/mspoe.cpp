#include "methods/mspoe.hpp"

#include <algorithm>
#include <cmath>

#include "methods/method_checks.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace {

namespace check = method_checks;
using nlohmann::json;

std::vector<GeneSchema> genes() {
  const MsPoe paper;
  constexpr double kMaxLayer = 1023;  // validate() checks the model's real layer count
  return {
      {"min_ratio", GeneType::real, paper.min_ratio, 0.1, 8, {}, "smallest per-head RoPE ratio"},
      {"max_ratio", GeneType::real, paper.max_ratio, 0.1, 8, {}, "largest per-head RoPE ratio"},
      {"alpha", GeneType::real, paper.alpha, 0, 100, {}, "position-awareness threshold (x row mean)"},
      {"first_layer", GeneType::integer, static_cast<double>(paper.first_layer), 0, kMaxLayer, {},
       "first layer with per-head ratios"},
      {"order", GeneType::categorical, paper.order, 0, 0, mspoe_orders(), "how heads are ranked to ratios"},
  };
}

}  // namespace

const std::vector<std::string>& mspoe_orders() {
  static const std::vector<std::string> orders = {"awareness", "reference-argsort", "sequential", "random",
                                                  "entropy"};
  return orders;
}

std::string mspoe_order_list() {
  std::string text;
  for (const std::string& order : mspoe_orders()) text += (text.empty() ? "" : ", ") + order;
  return text;
}

json mspoe_to_json(const MsPoe& m) {
  return {{"min_ratio", m.min_ratio}, {"max_ratio", m.max_ratio}, {"first_layer", m.first_layer},
          {"alpha", m.alpha},         {"order", m.order},         {"reference_spacing", m.reference_spacing},
          {"seed", m.seed}};
}

MsPoe mspoe_from_json(const json& m) {
  check::reject_unknown(m, "mspoe",
                        {"min_ratio", "max_ratio", "first_layer", "alpha", "order", "reference_spacing", "seed"});
  MsPoe p;
  p.min_ratio = check::number(m, "mspoe.min_ratio", p.min_ratio);
  p.max_ratio = check::number(m, "mspoe.max_ratio", p.max_ratio);
  p.alpha = check::number(m, "mspoe.alpha", p.alpha);
  p.first_layer = check::layer_index(m, "mspoe.first_layer", p.first_layer);
  if (m.contains("order")) {
    if (!m["order"].is_string()) check::bad("mspoe.order", "must be a string");
    p.order = m["order"].get<std::string>();
  }
  if (m.contains("reference_spacing")) {
    if (!m["reference_spacing"].is_boolean()) check::bad("mspoe.reference_spacing", "must be true or false");
    p.reference_spacing = m["reference_spacing"].get<bool>();
  }
  if (m.contains("seed")) {
    if (!m["seed"].is_number_unsigned()) check::bad("mspoe.seed", "must be an integer >= 0");
    p.seed = m["seed"].get<std::uint64_t>();
  }
  check::check_scale(p.min_ratio, "mspoe.min_ratio");
  check::check_scale(p.max_ratio, "mspoe.max_ratio");
  if (p.min_ratio > p.max_ratio) check::bad("mspoe", "min_ratio must be <= max_ratio");
  const auto& orders = mspoe_orders();
  if (std::find(orders.begin(), orders.end(), p.order) == orders.end())
    check::bad("mspoe.order", "'" + p.order + "' is not one of " + mspoe_order_list());
  return p;
}

void validate_mspoe(const MsPoe& mspoe, const ModelShape& model) {
  check::check_scale(mspoe.min_ratio, "mspoe.min_ratio");
  check::check_scale(mspoe.max_ratio, "mspoe.max_ratio");
  if (mspoe.min_ratio > mspoe.max_ratio) {
    check::bad("mspoe.min_ratio",
               std::to_string(mspoe.min_ratio) + " is above max_ratio " + std::to_string(mspoe.max_ratio));
  }
  check::check_at_least(mspoe.alpha, 0, "mspoe.alpha");
  check::check_layer(mspoe.first_layer, "mspoe.first_layer", model);
  const auto& orders = mspoe_orders();
  if (std::find(orders.begin(), orders.end(), mspoe.order) == orders.end())
    check::bad("mspoe.order", "'" + mspoe.order + "' is not one of " + mspoe_order_list());
}

MsPoe mspoe_from_genes(const GeneValues& genes) {
  MsPoe m;
  m.min_ratio = genes.number("min_ratio");
  m.max_ratio = genes.number("max_ratio");
  m.alpha = genes.number("alpha");
  m.first_layer = genes.integer("first_layer");
  m.order = genes.text("order");
  return m;
}

const MethodModule& mspoe_method() {
  static const MethodModule module = optional_field_method<MsPoe>(
      "mspoe", "mspoe", Mechanism::prompt_head_rope_scales,
      &Intervention::mspoe, genes(), {{"min_ratio", "max_ratio"}},
      {mspoe_to_json, mspoe_from_json, validate_mspoe, mspoe_from_genes},
      MsPoe{.first_layer = 0});
  return module;
}

}  // namespace midtune
