// The objective section: kind, fitness weights, the LPES and PI settings,
// the combo's member methods and the gene tables of the other methods.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/experiment/load_sections.hpp"
#include "methods/registry.hpp"

namespace midtune::load {
namespace {

constexpr double kGridTolerance = 1e-6;
const std::vector<std::string> kLpesKeys = {"curve", "degree", "x_step", "y_min", "y_max", "y_step"};

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

bool divides(double span, double step) {
  const double k = span / step;
  return std::abs(k - std::round(k)) < kGridTolerance;
}

FitnessWeights parse_weights(const MapReader& objective, const DatasetConfig& dataset) {
  FitnessWeights weights;
  const Field field = objective.field("weights");
  if (objective.has("weights")) {
    const MapReader section = objective.map("weights", {"beginning", "middle", "end"});
    weights.beginning = section.required("beginning").number_in(0, 1);
    weights.middle = section.required("middle").number_in(0, 1);
    weights.end = section.required("end").number_in(0, 1);
    const double sum = weights.beginning + weights.middle + weights.end;
    if (std::abs(sum - 1.0) > 1e-9) {
      field.fail("must each be >= 0 and sum to 1; they sum to " + number_text(sum));
    }
  }
  // LPES fitness buckets: first position = beginning, last = end, the rest = middle.
  if (dataset.gold_positions.size() < 3 && weights.middle > 0) {
    field.fail("middle weight " + number_text(weights.middle) +
               " needs a middle bucket, but dataset.gold_positions has only " +
               std::to_string(dataset.gold_positions.size()) +
               " positions; add a middle position or set middle to 0");
  }
  return weights;
}

LpesConfig parse_lpes(const MapReader& objective) {
  const MapReader section =
      objective.map("lpes", kLpesKeys);
  LpesConfig lpes;
  lpes.curve = section.choice_or("curve", lpes.curve, {"bezier", "linear", "step", "brute-force"});
  lpes.degree = static_cast<int>(section.integer_or("degree", lpes.degree, 1, 6));
  lpes.x_step = static_cast<int>(section.integer_or("x_step", lpes.x_step, 1, 1024));
  lpes.y_min = section.number_or("y_min", lpes.y_min, 0.01, 100);
  lpes.y_max = section.number_or("y_max", lpes.y_max, 0.01, 100);
  if (lpes.y_min >= lpes.y_max) {
    section.field(section.has("y_min") ? "y_min" : "y_max")
        .fail("y_min (" + number_text(lpes.y_min) + ") must be less than y_max (" +
              number_text(lpes.y_max) + ")");
  }
  const double span = lpes.y_max - lpes.y_min;
  lpes.y_step = section.number_or("y_step", lpes.y_step, 1e-6, span);
  if (!divides(span, lpes.y_step)) {
    section.field("y_step").fail("y_max - y_min (" + number_text(span) +
                                 ") must be a multiple of y_step (" + number_text(lpes.y_step) + ")");
  }
  return lpes;
}

PiConfig parse_pi(const MapReader& objective) {
  const MapReader section = objective.map("pi", {"min", "max", "step"});
  PiConfig pi;
  pi.min = section.number_or("min", pi.min, 0.01, 100);
  pi.max = section.number_or("max", pi.max, 0.01, 100);
  if (pi.min > pi.max) {
    section.field(section.has("min") ? "min" : "max")
        .fail("min (" + number_text(pi.min) + ") must not exceed max (" + number_text(pi.max) + ")");
  }
  pi.step = section.number_or("step", pi.step, 1e-6, 100);
  if (pi.max > pi.min && !divides(pi.max - pi.min, pi.step)) {
    section.field("step").fail("max - min (" + number_text(pi.max - pi.min) +
                               ") must be a multiple of step (" + number_text(pi.step) + ")");
  }
  return pi;
}

std::vector<std::string> parse_combo(const MapReader& objective) {
  const MapReader section = objective.map("combo", {"methods"});
  std::vector<std::string> methods;
  for (const auto& item : section.required("methods").list_of_min_size(2)) {
    const std::string method = item.choice(method_names());
    if (std::find(methods.begin(), methods.end(), method) != methods.end()) {
      item.fail("method " + method + " is listed twice");
    }
    // Members must set disjoint Intervention fields (lpes and pi both set rope_scale).
    const std::string& field = method_named(method).field;
    for (const std::string& earlier : methods) {
      if (method_named(earlier).field == field) {
        item.fail(earlier + " and " + method + " both set intervention." + field + "; combine only one");
      }
      // Mechanisms that cannot share a pass (methods/method_types.hpp).
      const auto& a = method_named(earlier).mechanism;
      const auto& b = method_named(method).mechanism;
      if (a && b) {
        if (const char* why = mechanism_conflict(*a, *b))
          item.fail(earlier + " and " + method + " cannot combine: " + why);
      }
    }
    methods.push_back(method);
  }
  return methods;
}

}  // namespace

ObjectiveConfig parse_objective(const MapReader& root, const DatasetConfig& dataset) {
  if (!root.has("objective")) root.required("objective");
  std::vector<std::string> valid = {"kind", "weights", "fitness", "lpes", "pi", "combo"};
  valid.insert(valid.end(), gene_table_methods().begin(), gene_table_methods().end());
  const MapReader section = root.map("objective", valid, {{"lpes", kLpesKeys}});

  ObjectiveConfig objective;
  objective.kind = section.required("kind").choice(objective_kinds());
  objective.weights = parse_weights(section, dataset);
  objective.fitness = section.choice_or("fitness", objective.fitness, {"accuracy", "gold_logprob", "blend"});
  if (objective.fitness != "accuracy" && dataset.metric != "teacher_forced") {
    section.field("fitness").fail(objective.fitness + " reads the teacher-forced gold log-probability; dataset.metric is " +
                                  dataset.metric + " (use teacher_forced, or fitness: accuracy)");
  }
  objective.lpes = parse_lpes(section);
  objective.pi = parse_pi(section);
  if (objective.kind == "combo") {
    objective.combo = parse_combo(section);
  } else {
    section.reject_if_present("combo", "applies only when objective.kind is combo");
  }
  const std::vector<std::string> used = objective.methods();
  for (const auto& method : gene_table_methods()) {
    const bool in_use = std::find(used.begin(), used.end(), method) != used.end();
    if (in_use || section.has(method)) {
      objective.method_genes.push_back(parse_method_genes(section, method));
    }
  }
  return objective;
}

std::optional<std::vector<std::string>> objective_gene_names(const ObjectiveConfig& objective) {
  const bool combo = objective.kind == "combo";
  std::vector<std::string> names;
  for (const auto& method : objective.methods()) {
    const std::string prefix = combo ? method + "." : "";
    if (method == "lpes") {
      if (objective.lpes.curve == "brute-force") return std::nullopt;  // one gene per model layer
      for (const char* axis : {"x", "y"}) {
        for (int k = 0; k <= objective.lpes.degree; ++k) {
          names.push_back(prefix + axis + std::to_string(k));
        }
      }
    } else if (method == "pi") {
      names.push_back(prefix + "scale");
    } else {
      for (const auto& schema : method_named(method).genes) names.push_back(prefix + schema.name);
    }
  }
  return names;
}

const GeneSchema* objective_gene_schema(const ObjectiveConfig& objective, const std::string& gene) {
  for (const auto& method : objective.methods()) {
    const std::string prefix = objective.kind == "combo" ? method + "." : "";
    for (const auto& schema : method_named(method).genes) {
      if (prefix + schema.name == gene) return &schema;
    }
  }
  return nullptr;
}

}  // namespace midtune::load
