// Racing (search.racing): the candidates of a GA batch are scored together
// on growing slices of the search split, and after each slice a candidate is
// dropped as soon as it cannot become a parent of the next generation: when
// N_pa others it competes with (the parents carried over, scored in full, and
// the batch's candidates still racing or scored in full) are each better than
// it by a paired upper confidence bound on the same items, or when its
// crossover sibling is (Algorithm 1 keeps only the fitter child of a pair).
// The first population has no carried parents and races within itself the
// same way. Candidates left at the end get the whole split, so every
// parent's fitness is exact. Racing the batch together, instead of each
// child alone against the worst carried parent, also drops a child that
// beats that parent but not the children that beat it.
//
// Units. Unit k holds the k-th item of every gold position in the racing
// order: a position's items sorted by the FNV-1a hash of their key (the base
// item, so on KV and MDQA a unit is one base item at every position; ties:
// slice order). A slice of m units has m items at every position, so with
// the per-position weights w (λ_B first, λ_M / (P − 2) each between, λ_E
// last) the fitness is the mean of the unit values
//   y_k = Σ_p w_p v_{p,k}     (v: correct 0/1, or the gold log-probability)
// over the split's n units, and one candidate's fitness minus another's is
// the mean of the paired differences d_k = y_k(one) − y_k(other).
//
// Bound. After m of n units (2 <= m < n), with d̄ and s the mean and sample
// standard deviation of d_1..d_m, the one-sided upper bound of the whole
// split's mean difference is (Student t, finite-population correction for
// drawing m of n units without replacement)
//   U = d̄ + t_{1 − α/L, m − 1} · s / √m · √(1 − m / n),   α = 1 − confidence,
// where L is the number of looks the schedule takes (Bonferroni over looks:
// the chance that one comparison wrongly calls one candidate better than
// another over all its looks stays <= α under the normal approximation; a
// parent-to-be is dropped only if one of the N_pa comparisons that drop it
// is such a mistake, since at most N_pa − 1 others are truly better). The
// other is better when U + margin < 0; margin is 1e-6 for the blend fitness
// (its log-probability term lies in (0, 1e-6], so the race is on accuracy),
// else 0.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/search/fitness.hpp"
#include "objectives/metrics.hpp"
#include "schema/store.hpp"

namespace midtune {

struct RaceSettings {
  int first = 0;   // units (items per gold position) of the first slice
  int step = 0;    // units added by each later slice
  double confidence = 0.95;
};

// One-sided Student t quantile: P(T_df <= t) = p, df >= 1, 0 < p < 1.
double student_t_quantile(double p, int degrees_of_freedom);

// Item indices of each unit, unit 0 first (see the header comment). `keys`
// pairs items across positions (empty: each item's own index). Throws
// std::invalid_argument when the positions hold different numbers of items.
std::vector<std::vector<std::size_t>> race_units(const std::vector<std::size_t>& position_index,
                                                 std::size_t positions, const std::vector<std::string>& keys);

// Slice ends in units: first, first + step, ... and finally `units` (the
// whole split). Only `units` when first >= units.
std::vector<std::size_t> race_schedule(const RaceSettings& settings, std::size_t units);

// Looks (slice ends with 2 <= m < units) a schedule takes.
std::size_t race_looks(const std::vector<std::size_t>& schedule, std::size_t units);

// Per-position weights w_p of the fitness (λ_B, λ_M / (P − 2) between, λ_E).
std::vector<double> position_weights(const metrics::BucketWeights& weights, std::size_t positions);

struct RaceBound {
  double mean = 0.0;   // d̄
  double upper = 0.0;  // U
  bool drop = false;   // U + margin < 0
};

// The bound after m = differences.size() of `units` units (m >= 2, m < units).
RaceBound race_bound(const std::vector<double>& differences, std::size_t units, double confidence, std::size_t looks,
                     double margin);

// Unit values y_1..y_m of the first `m` units. `samples` is indexed by item
// (nullptr: not stored; every item of the first m units must be there). The
// gold_logprob fitness reads the log-probability, the others correctness.
std::vector<double> race_unit_values(const std::vector<std::vector<std::size_t>>& units, std::size_t m,
                                     const std::vector<double>& weights, const std::vector<std::size_t>& position_index,
                                     const std::vector<const SampleRecord*>& samples, FitnessKind fitness);

// One member of a race at one look: its unit values on the slice so far.
struct RaceContender {
  std::vector<double> values;  // y_1..y_m, the same m for every contender of a look
  bool may_drop = true;        // false: scored in full already (a carried parent, a cached result)
  int sibling = -1;            // index of its crossover sibling among the contenders, or -1
};

// Which contenders a look drops (see the header comment): one that may drop
// is dropped when `parents` others are each better by the bound, or its
// sibling is. Every contender is judged against the same set (those given),
// so the `parents` best by slice mean are never dropped. m = values.size()
// must satisfy 2 <= m < units.
std::vector<bool> race_drops(const std::vector<RaceContender>& contenders, int parents, std::size_t units,
                             double confidence, std::size_t looks, double margin);

// The margin of race_bound for a fitness kind (see the header comment).
double race_margin(FitnessKind fitness);

}  // namespace midtune
