// Variation operators (pagmo2's algorithm internals). Each takes valid
// parents of a GenomeSpace and returns valid offspring only: values are
// drawn on the gene grids, clamped into range, and an offspring failing the
// space's predicate is discarded and redrawn (LPES: "Offspring that fail to
// meet the above condition are discarded, and the crossover or mutation
// process is repeated until the condition is satisfied").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ga/genome.hpp"
#include "core/ga/rng.hpp"

namespace midtune {

enum class MutationKind { lpes, uniform, gaussian, polynomial };
const char* to_string(MutationKind kind);
MutationKind mutation_kind_from_string(const std::string& name);

struct MutationConfig {
  MutationKind kind = MutationKind::lpes;
  // Probability that each gene is perturbed. Unset: 1 for lpes (every
  // coordinate moves within its eq. 9 interval), 1/n for the others.
  std::optional<double> rate;
  double max_dx = 2.0;   // lpes: M_x (Table 12)
  double max_dy = 0.2;   // lpes: M_y (Table 12)
  double sigma = 0.1;    // gaussian: std-dev as a fraction of the gene's range
  double eta = 20.0;     // polynomial: distribution index
  // Redraws before giving up; then the parent itself is returned (valid).
  int max_tries = 1000;
  void validate() const;
  bool operator==(const MutationConfig&) const = default;
};
void to_json(nlohmann::json& out, const MutationConfig& config);
void from_json(const nlohmann::json& in, MutationConfig& config);

enum class CrossoverKind { one_point, uniform, sbx };
const char* to_string(CrossoverKind kind);
CrossoverKind crossover_kind_from_string(const std::string& name);

struct CrossoverConfig {
  CrossoverKind kind = CrossoverKind::one_point;
  int max_tries = 4;        // N_ct (Table 12): tries for a valid child
  bool keep_fitter = true;  // LPES: of the two children keep the fitter
  double eta = 15.0;        // sbx: distribution index
  void validate() const;
  bool operator==(const CrossoverConfig&) const = default;
};
void to_json(nlohmann::json& out, const CrossoverConfig& config);
void from_json(const nlohmann::json& in, CrossoverConfig& config);

// LPES mutation (eq. 9): in grid steps, x_k moves uniformly within
// [max(x_{k-1}, x_k - M_x), min(x_{k+1}, x_k + M_x)] (x_{-1} = lowest x,
// x_{D+1} = highest x) and y_k within [max(y_min, y_k - M_y), min(y_max, y_k + M_y)],
// neighbours taken from the parent; a child whose x are not strictly
// increasing (eq. 10) is redrawn. Needs space.control_points().
Genome lpes_mutate(const GenomeSpace& space, const Genome& parent, const MutationConfig& config,
                   Rng& rng);
// Each gene with probability rate: a uniform grid value.
Genome uniform_mutate(const GenomeSpace& space, const Genome& parent, const MutationConfig& config,
                      Rng& rng);
// Each gene with probability rate: + N(0, (sigma * range)^2), snapped and
// clamped (categorical genes: a uniform other value).
Genome gaussian_mutate(const GenomeSpace& space, const Genome& parent, const MutationConfig& config,
                       Rng& rng);
// Each gene with probability rate: Deb's polynomial mutation (eta), snapped
// (categorical genes: a uniform other value).
Genome polynomial_mutate(const GenomeSpace& space, const Genome& parent,
                         const MutationConfig& config, Rng& rng);
// Dispatch on config.kind.
Genome mutate(const GenomeSpace& space, const Genome& parent, const MutationConfig& config,
              Rng& rng);

// Raw recombinations (no validity check; children may break the predicate).
// one_point: cut c uniform in 1..n-1, children a[:c]+b[c:] and b[:c]+a[c:].
std::vector<Genome> one_point_crossover(const Genome& a, const Genome& b, Rng& rng);
// uniform: each gene swapped with probability 1/2.
std::vector<Genome> uniform_crossover(const Genome& a, const Genome& b, Rng& rng);
// SBX (Deb & Agrawal) per numeric gene with probability 1/2, snapped and
// clamped; categorical genes swapped with probability 1/2.
std::vector<Genome> sbx_crossover(const GenomeSpace& space, const Genome& a, const Genome& b,
                                  double eta, Rng& rng);

// Up to config.max_tries recombinations of a and b; returns the valid
// children of the first try that gives at least one (1 or 2 genomes), or
// an empty vector when every try failed.
std::vector<Genome> crossover(const GenomeSpace& space, const Genome& a, const Genome& b,
                              const CrossoverConfig& config, Rng& rng);

}  // namespace midtune
