#include "core/ga/operators.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace midtune {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& reason) {
  throw std::invalid_argument(where + ": " + reason);
}

// Grid spacing of a numeric gene (1 for integer genes).
double grid_step(const Gene& gene) {
  if (const auto* g = std::get_if<FloatGene>(&gene)) return g->step;
  return 1.0;
}

double lowest(const Gene& gene) { return grid_value(gene, 0); }
double highest(const Gene& gene) { return grid_value(gene, grid_size(gene) - 1); }

double mutation_rate(const GenomeSpace& space, const MutationConfig& config) {
  if (config.rate) return *config.rate;
  if (config.kind == MutationKind::lpes) return 1.0;
  return space.size() == 0 ? 1.0 : 1.0 / static_cast<double>(space.size());
}

// A categorical gene moves to a uniformly drawn other value.
double other_category(const Gene& gene, double value, Rng& rng) {
  const std::int64_t count = grid_size(gene);
  if (count < 2) return value;
  std::int64_t index = rng.uniform_int(0, count - 2);
  if (index >= grid_index(gene, value)) ++index;
  return grid_value(gene, index);
}

// Draw children until one satisfies the space (LPES: "discarded and
// redrawn"); after max_tries the parent itself, which is valid.
template <class Draw>
Genome redraw_until_valid(const GenomeSpace& space, const Genome& parent, int max_tries, Draw draw) {
  space.require_valid(parent, "mutation parent");
  for (int attempt = 0; attempt < max_tries; ++attempt) {
    Genome child = draw();
    if (space.is_valid(child)) return child;
  }
  return parent;
}

// Per-gene mutation with probability rate; perturb(gene, value) is the new value.
template <class Perturb>
Genome per_gene_mutate(const GenomeSpace& space, const Genome& parent,
                       const MutationConfig& config, Rng& rng, Perturb perturb) {
  const double rate = mutation_rate(space, config);
  return redraw_until_valid(space, parent, config.max_tries, [&] {
    Genome child = parent;
    for (std::size_t i = 0; i < child.size(); ++i) {
      if (rng.bernoulli(rate)) child[i] = snap(space.gene(i), perturb(space.gene(i), child[i]));
    }
    // A mutant equal to its parent is a wasted candidate (a cache hit): at a
    // rate of 1/n about a third of mutants changed nothing. Move one gene.
    for (int attempt = 0; child == parent && !child.empty() && attempt < 16; ++attempt) {
      const auto i = static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(child.size()) - 1));
      child[i] = snap(space.gene(i), perturb(space.gene(i), child[i]));
    }
    return child;
  });
}

}  // namespace

const char* to_string(MutationKind kind) {
  switch (kind) {
    case MutationKind::lpes: return "lpes";
    case MutationKind::uniform: return "uniform";
    case MutationKind::gaussian: return "gaussian";
    case MutationKind::polynomial: return "polynomial";
  }
  return "?";
}

MutationKind mutation_kind_from_string(const std::string& name) {
  for (MutationKind kind : {MutationKind::lpes, MutationKind::uniform, MutationKind::gaussian,
                            MutationKind::polynomial}) {
    if (name == to_string(kind)) return kind;
  }
  fail("mutation.kind", "unknown '" + name + "' (expected lpes, uniform, gaussian or polynomial)");
}

const char* to_string(CrossoverKind kind) {
  switch (kind) {
    case CrossoverKind::one_point: return "one_point";
    case CrossoverKind::uniform: return "uniform";
    case CrossoverKind::sbx: return "sbx";
  }
  return "?";
}

CrossoverKind crossover_kind_from_string(const std::string& name) {
  for (CrossoverKind kind : {CrossoverKind::one_point, CrossoverKind::uniform, CrossoverKind::sbx}) {
    if (name == to_string(kind)) return kind;
  }
  fail("crossover.kind", "unknown '" + name + "' (expected one_point, uniform or sbx)");
}

void MutationConfig::validate() const {
  if (rate && !(*rate >= 0.0 && *rate <= 1.0)) fail("mutation.rate", "must be in [0, 1]");
  if (!(max_dx >= 0.0)) fail("mutation.max_dx", "must be >= 0");
  if (!(max_dy >= 0.0)) fail("mutation.max_dy", "must be >= 0");
  if (!(sigma > 0.0)) fail("mutation.sigma", "must be > 0");
  if (!(eta >= 0.0)) fail("mutation.eta", "must be >= 0");
  if (max_tries < 1) fail("mutation.max_tries", "must be >= 1");
}

void to_json(nlohmann::json& out, const MutationConfig& config) {
  out = {{"kind", to_string(config.kind)}, {"max_dx", config.max_dx}, {"max_dy", config.max_dy},
         {"sigma", config.sigma},          {"eta", config.eta},       {"max_tries", config.max_tries}};
  out["rate"] = config.rate ? nlohmann::json(*config.rate) : nlohmann::json(nullptr);
}

namespace {

double number_field(const std::string& where, const nlohmann::json& value) {
  if (!value.is_number()) fail(where, "must be a number");
  return value.get<double>();
}

int int_field(const std::string& where, const nlohmann::json& value) {
  if (!value.is_number_integer()) fail(where, "must be an integer");
  return value.get<int>();
}

}  // namespace

void from_json(const nlohmann::json& in, MutationConfig& config) {
  if (!in.is_object()) fail("mutation", "expected an object");
  for (const auto& [key, value] : in.items()) {
    const std::string where = "mutation." + key;
    if (key == "kind") {
      if (!value.is_string()) fail(where, "must be a string");
      config.kind = mutation_kind_from_string(value.get<std::string>());
    } else if (key == "rate") {
      config.rate = value.is_null() ? std::nullopt : std::optional(number_field(where, value));
    } else if (key == "max_dx" || key == "M_x") {
      config.max_dx = number_field(where, value);
    } else if (key == "max_dy" || key == "M_y") {
      config.max_dy = number_field(where, value);
    } else if (key == "sigma") {
      config.sigma = number_field(where, value);
    } else if (key == "eta") {
      config.eta = number_field(where, value);
    } else if (key == "max_tries") {
      config.max_tries = int_field(where, value);
    } else {
      fail(where, "is not a field (expected kind, rate, max_dx, max_dy, sigma, eta, max_tries)");
    }
  }
  config.validate();
}

void CrossoverConfig::validate() const {
  if (max_tries < 1) fail("crossover.max_tries", "must be >= 1");
  if (!(eta >= 0.0)) fail("crossover.eta", "must be >= 0");
}

void to_json(nlohmann::json& out, const CrossoverConfig& config) {
  out = {{"kind", to_string(config.kind)},
         {"max_tries", config.max_tries},
         {"keep_fitter", config.keep_fitter},
         {"eta", config.eta}};
}

void from_json(const nlohmann::json& in, CrossoverConfig& config) {
  if (!in.is_object()) fail("crossover", "expected an object");
  for (const auto& [key, value] : in.items()) {
    const std::string where = "crossover." + key;
    if (key == "kind") {
      if (!value.is_string()) fail(where, "must be a string");
      config.kind = crossover_kind_from_string(value.get<std::string>());
    } else if (key == "max_tries" || key == "N_ct") {
      config.max_tries = int_field(where, value);
    } else if (key == "keep_fitter") {
      if (!value.is_boolean()) fail(where, "must be true or false");
      config.keep_fitter = value.get<bool>();
    } else if (key == "eta") {
      config.eta = number_field(where, value);
    } else {
      fail(where, "is not a field (expected kind, max_tries, keep_fitter, eta)");
    }
  }
  config.validate();
}

Genome lpes_mutate(const GenomeSpace& space, const Genome& parent, const MutationConfig& config,
                   Rng& rng) {
  if (!space.control_points()) {
    fail("lpes mutation", "the genome space has no control-point layout (use uniform, gaussian "
                          "or polynomial mutation for other genomes)");
  }
  const int points = space.control_points()->degree + 1;
  const double rate = mutation_rate(space, config);
  // All bounds in grid steps of each gene (LPES eq. 9).
  auto index_of = [&](int gene) { return grid_index(space.gene(gene), parent[gene]); };
  return redraw_until_valid(space, parent, config.max_tries, [&] {
    Genome child = parent;
    for (int k = 0; k < points; ++k) {
      const Gene& x_gene = space.gene(2 * k);
      const Gene& y_gene = space.gene(2 * k + 1);
      if (rng.bernoulli(rate)) {
        const std::int64_t dx = std::llround(config.max_dx / grid_step(x_gene));
        const std::int64_t x = index_of(2 * k);
        const std::int64_t left = k == 0 ? 0 : index_of(2 * (k - 1));
        const std::int64_t right = k == points - 1 ? grid_size(x_gene) - 1 : index_of(2 * (k + 1));
        child[2 * k] = grid_value(x_gene, rng.uniform_int(std::max(left, x - dx), std::min(right, x + dx)));
      }
      if (rng.bernoulli(rate)) {
        const std::int64_t dy = std::llround(config.max_dy / grid_step(y_gene));
        const std::int64_t y = index_of(2 * k + 1);
        child[2 * k + 1] = grid_value(
            y_gene, rng.uniform_int(std::max<std::int64_t>(0, y - dy),
                                    std::min(grid_size(y_gene) - 1, y + dy)));
      }
    }
    return child;  // eq. 10 is checked by the space's predicate
  });
}

Genome uniform_mutate(const GenomeSpace& space, const Genome& parent, const MutationConfig& config,
                      Rng& rng) {
  return per_gene_mutate(space, parent, config, rng, [&](const Gene& gene, double) {
    return grid_value(gene, rng.uniform_int(0, grid_size(gene) - 1));
  });
}

Genome gaussian_mutate(const GenomeSpace& space, const Genome& parent, const MutationConfig& config,
                       Rng& rng) {
  return per_gene_mutate(space, parent, config, rng, [&](const Gene& gene, double value) {
    if (std::holds_alternative<CategoricalGene>(gene)) return other_category(gene, value, rng);
    return value + rng.normal() * config.sigma * (highest(gene) - lowest(gene));
  });
}

Genome polynomial_mutate(const GenomeSpace& space, const Genome& parent,
                         const MutationConfig& config, Rng& rng) {
  return per_gene_mutate(space, parent, config, rng, [&](const Gene& gene, double value) {
    if (std::holds_alternative<CategoricalGene>(gene)) return other_category(gene, value, rng);
    const double lo = lowest(gene);
    const double hi = highest(gene);
    if (!(hi > lo)) return value;
    // Deb & Goyal's bounded polynomial mutation.
    const double power = 1.0 / (config.eta + 1.0);
    const double u = rng.uniform01();
    double delta = 0.0;
    if (u < 0.5) {
      const double from_lo = 1.0 - (value - lo) / (hi - lo);
      delta = std::pow(2.0 * u + (1.0 - 2.0 * u) * std::pow(from_lo, config.eta + 1.0), power) - 1.0;
    } else {
      const double from_hi = 1.0 - (hi - value) / (hi - lo);
      delta = 1.0 - std::pow(2.0 * (1.0 - u) + 2.0 * (u - 0.5) * std::pow(from_hi, config.eta + 1.0),
                             power);
    }
    return value + delta * (hi - lo);
  });
}

Genome mutate(const GenomeSpace& space, const Genome& parent, const MutationConfig& config,
              Rng& rng) {
  switch (config.kind) {
    case MutationKind::lpes: return lpes_mutate(space, parent, config, rng);
    case MutationKind::uniform: return uniform_mutate(space, parent, config, rng);
    case MutationKind::gaussian: return gaussian_mutate(space, parent, config, rng);
    case MutationKind::polynomial: return polynomial_mutate(space, parent, config, rng);
  }
  fail("mutation", "unknown kind");
}

std::vector<Genome> one_point_crossover(const Genome& a, const Genome& b, Rng& rng) {
  if (a.size() != b.size()) fail("crossover", "parents differ in length");
  if (a.size() < 2) return {a, b};
  const auto cut = static_cast<std::ptrdiff_t>(rng.uniform_int(1, static_cast<std::int64_t>(a.size()) - 1));
  Genome first(a.begin(), a.begin() + cut);
  first.insert(first.end(), b.begin() + cut, b.end());
  Genome second(b.begin(), b.begin() + cut);
  second.insert(second.end(), a.begin() + cut, a.end());
  return {first, second};
}

std::vector<Genome> uniform_crossover(const Genome& a, const Genome& b, Rng& rng) {
  if (a.size() != b.size()) fail("crossover", "parents differ in length");
  Genome first = a;
  Genome second = b;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (rng.bernoulli(0.5)) std::swap(first[i], second[i]);
  }
  return {first, second};
}

std::vector<Genome> sbx_crossover(const GenomeSpace& space, const Genome& a, const Genome& b,
                                  double eta, Rng& rng) {
  if (a.size() != space.size() || b.size() != space.size()) fail("sbx crossover", "parent size");
  Genome first = a;
  Genome second = b;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!rng.bernoulli(0.5)) continue;
    if (std::holds_alternative<CategoricalGene>(space.gene(i))) {
      std::swap(first[i], second[i]);
      continue;
    }
    // Deb & Agrawal's simulated binary crossover, spread factor beta.
    const double u = rng.uniform01();
    const double beta = u <= 0.5 ? std::pow(2.0 * u, 1.0 / (eta + 1.0))
                                 : std::pow(1.0 / (2.0 * (1.0 - u)), 1.0 / (eta + 1.0));
    first[i] = snap(space.gene(i), 0.5 * ((1.0 + beta) * a[i] + (1.0 - beta) * b[i]));
    second[i] = snap(space.gene(i), 0.5 * ((1.0 - beta) * a[i] + (1.0 + beta) * b[i]));
  }
  return {first, second};
}

std::vector<Genome> crossover(const GenomeSpace& space, const Genome& a, const Genome& b,
                              const CrossoverConfig& config, Rng& rng) {
  space.require_valid(a, "crossover parent");
  space.require_valid(b, "crossover parent");
  for (int attempt = 0; attempt < config.max_tries; ++attempt) {
    std::vector<Genome> children;
    switch (config.kind) {
      case CrossoverKind::one_point: children = one_point_crossover(a, b, rng); break;
      case CrossoverKind::uniform: children = uniform_crossover(a, b, rng); break;
      case CrossoverKind::sbx: children = sbx_crossover(space, a, b, config.eta, rng); break;
    }
    std::erase_if(children, [&](const Genome& child) { return !space.is_valid(child); });
    if (!children.empty()) return children;
  }
  return {};
}

}  // namespace midtune
