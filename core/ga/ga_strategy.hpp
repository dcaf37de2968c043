// `ga`: LPES Algorithm 1 (paper 000 section 3.2) behind the ask/tell contract.
//
//   generation 0: S_0 = the seed (LPES eq. 8) + mutants of it up to N_ps
//                 (or N_ps uniform draws with init = random).
//   generation i = 1..T: parents S_pa = the best N_pa of S_{i-1} (truncation,
//                 or tournament); N_cr crossovers of two distinct random
//                 parents, each up to N_ct tries for a valid child; N_mu
//                 mutants of random parents. One ask() returns both
//                 children of every crossover and all mutants; at tell()
//                 the fitter child of each pair is kept (ties: the first),
//                 the other is dropped, and
//                 S_i = S_pa ∪ kept children ∪ mutants  (Algorithm 1 line 7).
//   A crossover with no valid child in N_ct tries yields a mutant of its
//   first parent instead, so the population size stays N_pa + N_cr + N_mu.
//   done() after generation T is told; best() is then Algorithm 1 line 9.
//   With patience = P > 0, done() also once P offspring generations in a row
//   brought no fitness above the best told before them (a stalled search
//   spends no more evaluations; the count is part of the saved state).
//
// With elites = k >= 0, S_i keeps the k best of S_{i-1} instead of the whole
// parent pool (the usual elitism for non-LPES genomes).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ga/genome.hpp"
#include "core/ga/operators.hpp"
#include "core/ga/rng.hpp"
#include "core/ga/selection.hpp"
#include "core/ga/strategy.hpp"

namespace midtune {

enum class InitKind { seed_mutants, random };

struct GaStrategyConfig {
  int population_size = 32;  // N_ps (Table 12)
  int parents = 12;          // N_pa
  int generations = 20;      // T
  int mutants = 16;          // N_mu
  int crossovers = 4;        // N_cr
  SelectionKind selection = SelectionKind::truncation;
  int tournament_size = 3;
  int elites = -1;  // -1: carry the whole parent pool (Algorithm 1); k >= 0: the k best
  InitKind init = InitKind::seed_mutants;
  // Overrides the space's seed for init = seed_mutants: {"gene": value, ...}.
  std::optional<nlohmann::json> initial_genome;
  MutationConfig mutation;    // defaults: lpes, M_x 2, M_y 0.2
  CrossoverConfig crossover;  // defaults: one_point, N_ct 4, keep the fitter
  // Redraw a child (mutant or crossover pair) whose decoded intervention the
  // proposal memory knows, up to kMaxProposalDraws draws. Off by default:
  // Algorithm 1 as published, and the results of existing experiments.
  bool unique_children = false;
  // Stop once this many offspring generations in a row found no fitness
  // above the best before them (0: always run all `generations`). Off by
  // default: Algorithm 1 runs its T generations.
  int patience = 0;

  // Throws std::invalid_argument naming the field and the reason.
  void validate() const;
  bool operator==(const GaStrategyConfig&) const = default;
};
void to_json(nlohmann::json& out, const GaStrategyConfig& config);
// Keys as the member names ("population_size", "mutation": {"kind": ..},
// ...); also accepts the paper's names N_ps, N_pa, T, N_mu, N_cr, N_ct, M_x,
// M_y. Missing keys keep Table 12 defaults; unknown keys are an error.
void from_json(const nlohmann::json& in, GaStrategyConfig& config);

// One evaluated member of the population.
struct Individual {
  Candidate candidate;
  double fitness = 0.0;
};

class GaStrategy final : public Strategy {
 public:
  // Throws std::invalid_argument for an invalid config, or when the config
  // needs what the space lacks (lpes mutation without control points,
  // seed_mutants without a seed).
  GaStrategy(GenomeSpace space, GaStrategyConfig config, std::uint64_t seed);

  std::vector<Candidate> ask() override;
  // fitness.size() must equal the last ask()'s size; NaN is an error
  // (report failures as -infinity).
  void tell(const std::vector<double>& fitness) override;
  bool done() const override;
  std::string stop_reason() const override;
  int generation() const override { return generation_; }
  std::vector<std::int64_t> population() const override;
  nlohmann::json save_state() const override;
  // Throws std::invalid_argument if the state is malformed or was saved by
  // a strategy with another kind, config or genome size.
  void load_state(const nlohmann::json& state) override;
  // With truncation selection and the whole parent pool carried (elites =
  // -1) the next parents are the N_pa best of the carried parents and the
  // batch's kept children (the first population: of the batch), so that is
  // the race; crossover pairs kept by fitness are siblings.
  std::optional<RaceField> race_field() const override;

  // Current population with fitness (empty before the first tell()).
  const std::vector<Individual>& members() const { return population_; }
  // Fittest member of the current population (ties: the oldest).
  std::optional<Individual> best() const;
  const GaStrategyConfig& config() const { return config_; }
  const GenomeSpace& space() const { return space_; }

 private:
  struct Pending {
    Candidate candidate;
    int pair = -1;  // crossover pair number, -1 for non-crossover candidates
  };
  // One crossover pair (or the mutant that replaces a pair without a valid
  // child), or one mutant: what a unique-children redraw draws again.
  struct Proposal {
    std::vector<Genome> genomes;
    Origin origin = Origin::mutation;
    std::vector<std::int64_t> parents;
  };
  Proposal draw_proposal(std::function<Proposal()> draw);
  void make_initial_batch();
  void make_offspring_batch();
  Candidate new_candidate(Genome genome, Origin origin, std::vector<std::int64_t> parents);
  Genome mutant_of(const Genome& parent);

  GenomeSpace space_;
  GaStrategyConfig config_;
  Rng rng_;
  int generation_ = 0;
  std::int64_t next_id_ = 0;
  std::vector<Individual> population_;
  std::vector<Individual> carried_;  // survivors into the next population
  std::vector<Pending> pending_;
  bool has_pending_ = false;
  double best_told_ = -std::numeric_limits<double>::infinity();  // best fitness told so far
  int stale_generations_ = 0;  // offspring generations since best_told_ last rose
};

}  // namespace midtune
