#include "core/ga/genome.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/ga/rng.hpp"

namespace midtune {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

std::string format(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Decimal places (<= 12) that represent x exactly, or -1 when none do.
int decimals_of(double x) {
  double scale = 1.0;
  for (int d = 0; d <= 12; ++d, scale *= 10.0) {
    const double scaled = x * scale;
    if (std::abs(scaled - std::round(scaled)) <= 1e-9 * scale) return d;
  }
  return -1;
}

// lo + index * step, rounded to the decimals of lo and step so that grid
// values are the doubles nearest to their decimal form (1.1, not
// 1.1000000000000001) and JSON, hashing and equality see one value.
double float_value(const FloatGene& gene, std::int64_t index) {
  const double raw = gene.lo + static_cast<double>(index) * gene.step;
  const int d_lo = decimals_of(gene.lo);
  const int d_step = decimals_of(gene.step);
  if (d_lo < 0 || d_step < 0) return raw;
  const double scale = std::pow(10.0, std::max(d_lo, d_step));
  const double rounded = std::round(raw * scale) / scale;
  return std::abs(rounded - raw) <= 1e-9 * std::max(1.0, std::abs(raw)) ? rounded : raw;
}

std::int64_t float_count(const FloatGene& gene) {
  return static_cast<std::int64_t>(std::floor((gene.hi - gene.lo) / gene.step + 1e-9)) + 1;
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

}  // namespace

const std::string& gene_name(const Gene& gene) {
  return std::visit([](const auto& g) -> const std::string& { return g.name; }, gene);
}

std::int64_t grid_size(const Gene& gene) {
  return std::visit(Overloaded{
                        [](const IntGene& g) { return g.hi - g.lo + 1; },
                        [](const FloatGene& g) { return float_count(g); },
                        [](const CategoricalGene& g) {
                          return static_cast<std::int64_t>(g.values.size());
                        },
                    },
                    gene);
}

double grid_value(const Gene& gene, std::int64_t index) {
  if (index < 0 || index >= grid_size(gene)) {
    throw std::out_of_range("gene " + gene_name(gene) + ": grid index " + std::to_string(index) +
                            " out of range");
  }
  return std::visit(Overloaded{
                        [&](const IntGene& g) { return static_cast<double>(g.lo + index); },
                        [&](const FloatGene& g) { return float_value(g, index); },
                        [&](const CategoricalGene&) { return static_cast<double>(index); },
                    },
                    gene);
}

std::int64_t grid_index(const Gene& gene, double value) {
  if (!std::isfinite(value)) {
    throw std::invalid_argument("gene " + gene_name(gene) + ": value " + format(value) +
                                " is not finite");
  }
  const double position = std::visit(Overloaded{
                                         [&](const IntGene& g) { return value - g.lo; },
                                         [&](const FloatGene& g) { return (value - g.lo) / g.step; },
                                         [&](const CategoricalGene&) { return value; },
                                     },
                                     gene);
  const double last = static_cast<double>(grid_size(gene) - 1);
  return static_cast<std::int64_t>(std::round(std::clamp(position, 0.0, last)));
}

double snap(const Gene& gene, double value) { return grid_value(gene, grid_index(gene, value)); }

bool on_grid(const Gene& gene, double value) {
  return std::isfinite(value) && close(value, snap(gene, value));
}

void validate_gene(const Gene& gene) {
  const std::string& name = gene_name(gene);
  if (name.empty()) throw std::invalid_argument("gene: name must not be empty");
  auto fail = [&](const std::string& reason) {
    throw std::invalid_argument("gene " + name + ": " + reason);
  };
  std::visit(Overloaded{
                 [&](const IntGene& g) {
                   if (g.lo > g.hi) fail("lo > hi");
                 },
                 [&](const FloatGene& g) {
                   if (!std::isfinite(g.lo) || !std::isfinite(g.hi)) fail("lo/hi must be finite");
                   if (g.lo > g.hi) fail("lo > hi");
                   if (!(g.step > 0.0) || !std::isfinite(g.step)) fail("step must be > 0");
                   if (float_count(g) > (std::int64_t{1} << 40)) fail("grid too fine");
                 },
                 [&](const CategoricalGene& g) {
                   if (g.values.empty()) fail("needs at least one value");
                   for (std::size_t i = 0; i < g.values.size(); ++i) {
                     if (!g.values[i].is_string() && !g.values[i].is_number()) {
                       fail("value " + std::to_string(i) + " must be a string or a number");
                     }
                     for (std::size_t j = 0; j < i; ++j) {
                       if (g.values[i] == g.values[j]) fail("duplicate value " + g.values[i].dump());
                     }
                   }
                 },
             },
             gene);
}

nlohmann::json gene_to_json(const Gene& gene) {
  return std::visit(
      Overloaded{
          [](const IntGene& g) {
            return nlohmann::json{{"name", g.name}, {"type", "int"}, {"lo", g.lo}, {"hi", g.hi}};
          },
          [](const FloatGene& g) {
            return nlohmann::json{
                {"name", g.name}, {"type", "float"}, {"lo", g.lo}, {"hi", g.hi}, {"step", g.step}};
          },
          [](const CategoricalGene& g) {
            return nlohmann::json{{"name", g.name}, {"type", "categorical"}, {"values", g.values}};
          },
      },
      gene);
}

Gene gene_from_json(const nlohmann::json& in) {
  if (!in.is_object()) throw std::invalid_argument("gene: expected an object");
  const std::string name = in.contains("name") && in["name"].is_string()
                               ? in["name"].get<std::string>()
                               : throw std::invalid_argument("gene: missing string field 'name'");
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!in.contains(key)) throw std::invalid_argument("gene " + name + ": missing field '" + key + "'");
    return in[key];
  };
  auto number = [&](const char* key) {
    const auto& v = field(key);
    if (!v.is_number()) throw std::invalid_argument("gene " + name + ": '" + key + "' must be a number");
    return v.get<double>();
  };
  auto integer = [&](const char* key) {
    const auto& v = field(key);
    if (!v.is_number_integer()) {
      throw std::invalid_argument("gene " + name + ": '" + key + "' must be an integer");
    }
    return v.get<std::int64_t>();
  };
  const auto& type = field("type");
  Gene gene;
  if (type == "int") {
    gene = IntGene{name, integer("lo"), integer("hi")};
  } else if (type == "float") {
    gene = FloatGene{name, number("lo"), number("hi"), number("step")};
  } else if (type == "categorical") {
    const auto& values = field("values");
    if (!values.is_array()) throw std::invalid_argument("gene " + name + ": 'values' must be a list");
    gene = CategoricalGene{name, values.get<std::vector<nlohmann::json>>()};
  } else {
    throw std::invalid_argument("gene " + name + ": type " + type.dump() +
                                " unknown (expected int, float or categorical)");
  }
  validate_gene(gene);
  return gene;
}

double gene_value_from_json(const Gene& gene, const nlohmann::json& value) {
  const std::string where = "gene " + gene_name(gene) + " = " + value.dump();
  if (const auto* categorical = std::get_if<CategoricalGene>(&gene)) {
    auto it = std::find(categorical->values.begin(), categorical->values.end(), value);
    if (it == categorical->values.end()) {
      throw std::invalid_argument(where + " is not one of " + nlohmann::json(categorical->values).dump());
    }
    return static_cast<double>(it - categorical->values.begin());
  }
  if (!value.is_number()) throw std::invalid_argument(where + " must be a number");
  const double number = value.get<double>();
  if (!on_grid(gene, number)) {
    throw std::invalid_argument(where + " is not on its grid or out of range " + gene_to_json(gene).dump());
  }
  return snap(gene, number);
}

GenomeSpace::GenomeSpace(std::vector<Gene> genes, GenomePredicate predicate,
                         std::string predicate_description)
    : genes_(std::move(genes)),
      predicate_(std::move(predicate)),
      predicate_description_(std::move(predicate_description)) {
  std::set<std::string> seen;
  for (const Gene& gene : genes_) {
    validate_gene(gene);
    if (!seen.insert(gene_name(gene)).second) {
      throw std::invalid_argument("genome space: duplicate gene name " + gene_name(gene));
    }
  }
}

std::optional<std::size_t> GenomeSpace::find(const std::string& name) const {
  for (std::size_t i = 0; i < genes_.size(); ++i) {
    if (gene_name(genes_[i]) == name) return i;
  }
  return std::nullopt;
}

std::size_t GenomeSpace::index_of(const std::string& name) const {
  if (auto index = find(name)) return *index;
  std::string known;
  for (const Gene& gene : genes_) known += (known.empty() ? "" : ", ") + gene_name(gene);
  throw std::invalid_argument("genome space: no gene named '" + name + "' (genes: " + known + ")");
}

std::vector<std::string> GenomeSpace::names() const {
  std::vector<std::string> out;
  for (const Gene& gene : genes_) out.push_back(gene_name(gene));
  return out;
}

Genome GenomeSpace::snap(const Genome& genome) const {
  if (genome.size() != genes_.size()) {
    throw std::invalid_argument("genome has " + std::to_string(genome.size()) +
                                " values, the space has " + std::to_string(genes_.size()) +
                                " genes");
  }
  Genome out(genome.size());
  for (std::size_t i = 0; i < genes_.size(); ++i) out[i] = midtune::snap(genes_[i], genome[i]);
  return out;
}

bool GenomeSpace::satisfies_predicate(const Genome& genome) const {
  return !predicate_ || predicate_(genome);
}

std::string GenomeSpace::why_invalid(const Genome& genome) const {
  if (genome.size() != genes_.size()) {
    return "genome has " + std::to_string(genome.size()) + " values, the space has " +
           std::to_string(genes_.size()) + " genes";
  }
  for (std::size_t i = 0; i < genes_.size(); ++i) {
    const double value = genome[i];
    const std::string name = gene_name(genes_[i]);
    if (!std::isfinite(value)) return "gene " + name + " = " + format(value) + " is not finite";
    if (!on_grid(genes_[i], value)) {
      return "gene " + name + " = " + format(value) + " is not on its grid or out of range " +
             gene_to_json(genes_[i]).dump();
    }
  }
  if (!satisfies_predicate(genome)) {
    return "genome breaks the space's constraint" +
           (predicate_description_.empty() ? std::string() : ": " + predicate_description_);
  }
  return {};
}

void GenomeSpace::require_valid(const Genome& genome, const std::string& context) const {
  const std::string reason = why_invalid(genome);
  if (!reason.empty()) throw std::invalid_argument(context + ": " + reason);
}

nlohmann::json GenomeSpace::to_json(const Genome& genome) const {
  require_valid(genome, "genome to JSON");
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t i = 0; i < genes_.size(); ++i) {
    const double value = genome[i];
    out[gene_name(genes_[i])] = std::visit(
        Overloaded{
            [&](const IntGene&) { return nlohmann::json(static_cast<std::int64_t>(std::llround(value))); },
            [&](const FloatGene&) { return nlohmann::json(value); },
            [&](const CategoricalGene& g) { return g.values[static_cast<std::size_t>(std::llround(value))]; },
        },
        genes_[i]);
  }
  return out;
}

Genome GenomeSpace::from_json(const nlohmann::json& in) const {
  if (!in.is_object()) throw std::invalid_argument("genome: expected an object keyed by gene name");
  for (const auto& [key, value] : in.items()) {
    if (!find(key)) index_of(key);  // throws naming the unknown gene
  }
  Genome genome(genes_.size());
  for (std::size_t i = 0; i < genes_.size(); ++i) {
    const std::string& name = gene_name(genes_[i]);
    if (!in.contains(name)) throw std::invalid_argument("genome: gene " + name + " is missing");
    genome[i] = gene_value_from_json(genes_[i], in[name]);
  }
  require_valid(genome, "genome");
  return genome;
}

Genome GenomeSpace::random_genome(Rng& rng, int max_tries) const {
  Genome genome(genes_.size());
  for (int attempt = 0; attempt < max_tries; ++attempt) {
    for (std::size_t i = 0; i < genes_.size(); ++i) {
      genome[i] = grid_value(genes_[i], rng.uniform_int(0, grid_size(genes_[i]) - 1));
    }
    if (satisfies_predicate(genome)) return genome;
  }
  throw std::runtime_error("genome space: no valid genome in " + std::to_string(max_tries) +
                           " uniform draws (constraint: " + predicate_description_ + ")");
}

void GenomeSpace::set_seed(Genome seed) {
  require_valid(seed, "genome space seed");
  seed_ = std::move(seed);
}

void GenomeSpace::set_control_points(ControlPointLayout layout) {
  const std::size_t expected = 2 * static_cast<std::size_t>(layout.degree + 1);
  if (layout.degree < 1 || genes_.size() != expected) {
    throw std::invalid_argument("genome space: control-point layout of degree " +
                                std::to_string(layout.degree) + " needs " +
                                std::to_string(expected) + " genes, the space has " +
                                std::to_string(genes_.size()));
  }
  for (const Gene& gene : genes_) {
    if (std::holds_alternative<CategoricalGene>(gene)) {
      throw std::invalid_argument("genome space: control-point gene " + gene_name(gene) +
                                  " must be numeric");
    }
  }
  control_points_ = layout;
}

}  // namespace midtune
