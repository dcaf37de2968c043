// The problem side of the search (pagmo2's "problem"): a GenomeSpace of typed
// genes on grids, with an optional validity predicate. A Genome
// (strategy.hpp) is one double per gene: the value for integer and stepped
// float genes, the index of the chosen value for categorical genes.
//
// A genome is valid when it has one finite value per gene, each value lies
// on its gene's grid and inside its range, and the predicate holds. Every
// operator and strategy emits valid genomes only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ga/strategy.hpp"

namespace midtune {

class Rng;

struct IntGene {
  std::string name;
  std::int64_t lo = 0;
  std::int64_t hi = 0;
};

// Values lo, lo + step, ..., up to hi (hi itself if (hi - lo) / step is whole).
struct FloatGene {
  std::string name;
  double lo = 0.0;
  double hi = 0.0;
  double step = 0.1;
};

struct CategoricalGene {
  std::string name;
  std::vector<nlohmann::json> values;  // strings or numbers
};

using Gene = std::variant<IntGene, FloatGene, CategoricalGene>;

const std::string& gene_name(const Gene& gene);
// Number of grid values of the gene (>= 1).
std::int64_t grid_size(const Gene& gene);
// The index-th grid value (as stored in a Genome). Throws if out of range.
double grid_value(const Gene& gene, std::int64_t index);
// Index of the grid value nearest to value, clamped into the range.
std::int64_t grid_index(const Gene& gene, double value);
// Nearest grid value, clamped into the range (non-finite values throw).
double snap(const Gene& gene, double value);
// True when value is (within 1e-9 relative) a grid value inside the range.
bool on_grid(const Gene& gene, double value);
// Throws std::invalid_argument naming the gene and the reason.
void validate_gene(const Gene& gene);
// A value in the genome JSON form (categorical: the value itself; numeric:
// a number on the grid) -> the Genome entry. Throws std::invalid_argument
// "gene <name> = <value> ..." when it is not one of the gene's values.
double gene_value_from_json(const Gene& gene, const nlohmann::json& value);

// {"name": .., "type": "int", "lo": .., "hi": ..} |
// {"name": .., "type": "float", "lo": .., "hi": .., "step": ..} |
// {"name": .., "type": "categorical", "values": [..]}
nlohmann::json gene_to_json(const Gene& gene);
Gene gene_from_json(const nlohmann::json& in);  // throws naming the field

// Marks a space whose genes are LPES control points x_0, y_0, ..., x_D, y_D
// (gene 2k is x_k, gene 2k+1 is y_k), so the LPES operators (eqs. 9-10) apply.
struct ControlPointLayout {
  int degree = 3;
};

using GenomePredicate = std::function<bool(const Genome&)>;

class GenomeSpace {
 public:
  GenomeSpace() = default;
  // Throws std::invalid_argument on an invalid gene or a duplicate name.
  explicit GenomeSpace(std::vector<Gene> genes, GenomePredicate predicate = {},
                       std::string predicate_description = {});

  std::size_t size() const { return genes_.size(); }
  const std::vector<Gene>& genes() const { return genes_; }
  const Gene& gene(std::size_t index) const { return genes_.at(index); }
  // Lookup by name; the throwing forms name the missing gene.
  std::optional<std::size_t> find(const std::string& name) const;
  std::size_t index_of(const std::string& name) const;
  const Gene& gene(const std::string& name) const { return genes_[index_of(name)]; }
  std::vector<std::string> names() const;

  // Each value snapped to its gene's grid and clamped into range. The
  // predicate is not repaired (operators redraw instead).
  Genome snap(const Genome& genome) const;
  bool satisfies_predicate(const Genome& genome) const;
  bool is_valid(const Genome& genome) const { return why_invalid(genome).empty(); }
  // Empty when valid, otherwise the first reason ("gene y2 = 2.3 is above 2").
  std::string why_invalid(const Genome& genome) const;
  // Throws std::invalid_argument "<context>: <reason>" unless valid.
  void require_valid(const Genome& genome, const std::string& context) const;
  const std::string& predicate_description() const { return predicate_description_; }

  // {"gene name": value, ...}; categorical genes give the value, not the index.
  nlohmann::json to_json(const Genome& genome) const;
  // Inverse of to_json; every gene must be present, values must be on the
  // grid and the result valid. Throws std::invalid_argument naming the gene.
  Genome from_json(const nlohmann::json& in) const;

  // A uniformly drawn valid genome: each gene uniform over its grid, redrawn
  // while the predicate fails (up to max_tries, then std::runtime_error).
  Genome random_genome(Rng& rng, int max_tries = 100000) const;

  // Optional starting genome (LPES eq. 8 for control-point spaces).
  const std::optional<Genome>& seed() const { return seed_; }
  void set_seed(Genome seed);  // must be valid
  const std::optional<ControlPointLayout>& control_points() const { return control_points_; }
  void set_control_points(ControlPointLayout layout);  // checks the gene layout

 private:
  std::vector<Gene> genes_;
  GenomePredicate predicate_;
  std::string predicate_description_;
  std::optional<Genome> seed_;
  std::optional<ControlPointLayout> control_points_;
};

}  // namespace midtune
