// `nsga2`: Pareto search over two or three objectives (Deb, Pratap, Agarwal
// and Meyarivan, "A fast and elitist multiobjective genetic algorithm:
// NSGA-II", IEEE TEC 2002) behind the ask/tell contract. Every objective is
// maximised (the caller negates one it wants small, e.g. the gap).
//
//   generation 0: the space's seed genome (when it has one) and uniform
//                 draws of valid genomes, N in all.
//   generation g >= 1: N offspring, each from two parents picked by binary
//                 tournament under the crowded comparison (lower front
//                 rank wins, then larger crowding distance, then the older
//                 individual), recombined (first valid child of up to
//                 N_ct tries; the first parent when none) and mutated.
//   tell(): parents ∪ offspring are sorted into non-dominated fronts; the
//           next population takes whole fronts while they fit and the
//           least crowded members of the front that does not.
//   done() after `generations` offspring generations have been told.
//
// Deterministic for a seed and the objective values told; the whole state
// (RNG included) round-trips through save_state()/load_state().
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ga/genome.hpp"
#include "core/ga/operators.hpp"
#include "core/ga/rng.hpp"
#include "core/ga/strategy.hpp"

namespace midtune {

struct Nsga2Config {
  int population_size = 24;  // N
  int generations = 10;      // offspring generations after the initial one
  int objectives = 2;        // 2 or 3
  MutationConfig mutation = [] { MutationConfig m; m.kind = MutationKind::polynomial; return m; }();
  CrossoverConfig crossover = [] { CrossoverConfig c; c.kind = CrossoverKind::sbx; return c; }();
  // Redraw an offspring whose decoded intervention the proposal memory knows
  // (Strategy::draw_unique).
  bool unique_children = false;
  // Throws std::invalid_argument naming the field and the reason.
  void validate() const;
  bool operator==(const Nsga2Config&) const = default;
};
void to_json(nlohmann::json& out, const Nsga2Config& config);
// Unknown keys are an error; missing keys keep the defaults above.
void from_json(const nlohmann::json& in, Nsga2Config& config);

// Fronts of non-dominated points (fast non-dominated sort), best front
// first; each front lists point indices in increasing order. a dominates b
// when a >= b in every objective and > in one (maximisation).
std::vector<std::vector<std::size_t>> non_dominated_fronts(const std::vector<std::vector<double>>& objectives);

// Crowding distance of each member of `front` (same order): the sum over
// objectives of the normalised gap between its two neighbours; the extremes
// of every objective get +infinity.
std::vector<double> crowding_distance(const std::vector<std::vector<double>>& objectives,
                                      const std::vector<std::size_t>& front);

class Nsga2Strategy final : public Strategy {
 public:
  Nsga2Strategy(GenomeSpace space, Nsga2Config config, std::uint64_t seed);

  std::vector<Candidate> ask() override;
  // Single-objective tell is refused: nsga2 needs one vector per candidate.
  void tell(const std::vector<double>& fitness) override;
  int objectives() const override { return config_.objectives; }
  void tell_objectives(const std::vector<std::vector<double>>& values) override;
  bool done() const override;
  int generation() const override { return generation_; }
  std::vector<std::int64_t> population() const override;
  nlohmann::json save_state() const override;
  void load_state(const nlohmann::json& state) override;

  // Ids of the current population's first front (the Pareto set found so far).
  std::vector<std::int64_t> front() const;

 private:
  struct Member {
    Candidate candidate;
    std::vector<double> objectives;
    int rank = 0;
    double crowding = 0.0;
  };
  // Crowded-comparison binary tournament over the population.
  const Member& tournament();
  // Sets rank and crowding of every member of `members` and keeps the best `keep`.
  static std::vector<Member> select(std::vector<Member> members, std::size_t keep);

  GenomeSpace space_;
  Nsga2Config config_;
  Rng rng_;
  int generation_ = 0;
  std::int64_t next_id_ = 0;
  std::vector<Member> population_;
  std::vector<Candidate> pending_;
  bool has_pending_ = false;
};

}  // namespace midtune
