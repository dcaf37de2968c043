// objective.<method>.genes: each gene is a fixed value, a stepped interval
// {min, max, step, start} or a list {values, start}; absent genes stay at
// their paper default.
#include <cmath>
#include <sstream>

#include "core/experiment/load_sections.hpp"
#include "core/experiment/nearest_name.hpp"
#include "methods/registry.hpp"

namespace midtune::load {
namespace {

constexpr double kGridTolerance = 1e-6;

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

bool on_grid(double value, double origin, double step) {
  if (step <= 0) return value == origin;
  const double k = (value - origin) / step;
  return std::abs(k - std::round(k)) < kGridTolerance;
}

double parse_gene_number(const Field& field, const GeneSchema& schema) {
  if (schema.type == GeneType::integer) {
    return static_cast<double>(field.integer_in(static_cast<std::int64_t>(schema.lower),
                                                static_cast<std::int64_t>(schema.upper)));
  }
  return field.number_in(schema.lower, schema.upper);
}

// Why `value` is not a value of `range`, or "" when it is.
std::string outside_reason(const GeneRange& range, const GeneValue& value) {
  const std::string shown = gene_value_to_string(value);
  if (range.listed) {
    for (const auto& listed : range.values) {
      if (listed == value) return "";
    }
    std::vector<std::string> names;
    for (const auto& listed : range.values) names.push_back(gene_value_to_string(listed));
    return shown + " is not among the values [" + join_names(names, ", ") + "]";
  }
  const double number = std::get<double>(value);
  if (number < range.min || number > range.max) {
    return shown + " is outside [" + number_text(range.min) + ", " + number_text(range.max) + "]";
  }
  if (!on_grid(number, range.min, range.step)) {
    return shown + " is not on the grid min + k*step (" + number_text(range.min) + " + k*" +
           number_text(range.step) + ")";
  }
  return "";
}

void parse_listed(const MapReader& spec, const GeneSchema& schema, GeneRange& range) {
  const std::string reason = schema.type == GeneType::categorical
                                 ? "a categorical gene lists its values; min/max/step do not apply"
                                 : "give either values or min/max/step, not both";
  for (const char* key : {"min", "max", "step"}) spec.reject_if_present(key, reason);
  range.listed = true;
  for (const auto& item : spec.required("values").list_of_min_size(1)) {
    GeneValue value = parse_gene_value(item, schema);
    for (const auto& earlier : range.values) {
      if (earlier == value) item.fail("duplicate value " + gene_value_to_string(value));
    }
    range.values.push_back(std::move(value));
  }
}

void parse_interval(const MapReader& spec, const GeneSchema& schema, GeneRange& range) {
  range.min = parse_gene_number(spec.required("min"), schema);
  const Field max_field = spec.required("max");
  range.max = parse_gene_number(max_field, schema);
  if (range.max < range.min) {
    max_field.fail("must be >= min (" + number_text(range.min) + ")");
  }
  if (schema.type == GeneType::integer) {
    range.step = static_cast<double>(spec.integer_or("step", 1, 1, 1 << 20));
  } else if (range.max > range.min) {
    const Field step = spec.required("step");
    range.step = step.number();
    if (range.step <= 0) step.fail("must be > 0");
  } else if (spec.has("step")) {
    range.step = spec.field("step").number();
  }
  if (!on_grid(range.max, range.min, range.step)) {
    spec.field("step").fail("max - min (" + number_text(range.max - range.min) +
                            ") must be a multiple of step (" + number_text(range.step) + ")");
  }
}

GeneRange parse_gene(const Field& field, const GeneSchema& schema, const std::string& method) {
  GeneRange range;
  range.name = schema.name;
  range.type = schema.type;
  if (!field.is_map()) {  // a bare value: the gene is fixed there
    range.listed = true;
    range.values = {parse_gene_value(field, schema)};
    range.start = range.values.front();
    return range;
  }
  const MapReader spec(field, {"min", "max", "step", "values", "start"});
  if (schema.type == GeneType::categorical || spec.has("values")) {
    parse_listed(spec, schema, range);
  } else {
    parse_interval(spec, schema, range);
  }
  const Field start = spec.field("start");
  if (spec.has("start")) {
    range.start = parse_gene_value(start, schema);
    const std::string reason = outside_reason(range, range.start);
    if (!reason.empty()) start.fail(reason);
  } else if (!schema.paper_default) {
    start.fail("the " + method + " paper gives no default for " + schema.name + ": set start");
  } else {
    range.start = *schema.paper_default;
    const std::string reason = outside_reason(range, range.start);
    if (!reason.empty()) start.fail("the paper default " + reason + ": set start");
  }
  return range;
}

GeneRange paper_default_gene(const GeneSchema& schema) {
  GeneRange range;
  range.name = schema.name;
  range.type = schema.type;
  range.listed = true;
  range.values = {*schema.paper_default};
  range.start = *schema.paper_default;
  return range;
}

}  // namespace

GeneValue parse_gene_value(const Field& field, const GeneSchema& schema) {
  if (schema.type == GeneType::categorical) return field.choice(schema.choices);
  return parse_gene_number(field, schema);
}

MethodGenes parse_method_genes(const MapReader& objective, const std::string& method) {
  const std::vector<GeneSchema>& schemas = method_named(method).genes;
  std::vector<std::string> names;
  for (const auto& schema : schemas) names.push_back(schema.name);
  const MapReader section = objective.map(method, {"genes"});
  const MapReader genes = section.map("genes", names);

  MethodGenes result;
  result.method = method;
  for (const auto& schema : schemas) {
    if (genes.has(schema.name)) {
      result.genes.push_back(parse_gene(genes.field(schema.name), schema, method));
    } else if (schema.paper_default) {
      result.genes.push_back(paper_default_gene(schema));
    } else {
      genes.field(schema.name)
          .fail("missing: the " + method + " paper gives no default for " + schema.name + " (" +
                schema.meaning + "); set it, e.g. {min: 8, max: 20, step: 1, start: 10}");
    }
  }
  for (const auto& order : method_named(method).orders) {
    const GeneValue& lower = result.gene(order.lower).start;
    const GeneValue& upper = result.gene(order.upper).start;
    if (std::get<double>(lower) > std::get<double>(upper)) {
      genes.field(order.upper)
          .fail("start " + gene_value_to_string(upper) + " is below " + order.lower + " start " +
                gene_value_to_string(lower) + ": " + order.lower + " must not exceed " +
                order.upper);
    }
  }
  return result;
}

}  // namespace midtune::load
