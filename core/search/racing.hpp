// Racing (search.racing): a GA child is scored on growing slices of the
// search split and dropped as soon as the upper confidence bound of its
// fitness minus the parent cut-off's (the worst parent carried into the next
// population, the fitness a child must beat to become a parent), paired on
// the same items, falls below zero. The first population, which has no
// parents yet, races within itself: against the N_pa-th best of its members
// scored in full before (Strategy::race_within_batch). Survivors get the
// whole split, so every parent's fitness is exact.
//
// Units. Unit k holds the k-th item of every gold position in the racing
// order: a position's items sorted by the FNV-1a hash of their key (the base
// item, so on KV and MDQA a unit is one base item at every position; ties:
// slice order). A slice of m units has m items at every position, so with
// the per-position weights w (λ_B first, λ_M / (P − 2) each between, λ_E
// last) the fitness is the mean of the unit values
//   y_k = Σ_p w_p v_{p,k}     (v: correct 0/1, or the gold log-probability)
// over the split's n units, and a child's fitness minus the cut-off's is the
// mean of the paired differences d_k = y_k(child) − y_k(cut-off).
//
// Bound. After m of n units (2 <= m < n), with d̄ and s the mean and sample
// standard deviation of d_1..d_m, the one-sided upper bound of the whole
// split's mean difference is (Student t, finite-population correction for
// drawing m of n units without replacement)
//   U = d̄ + t_{1 − α/L, m − 1} · s / √m · √(1 − m / n),   α = 1 − confidence,
// where L is the number of looks the schedule takes (Bonferroni: the chance
// of wrongly dropping a child over all its looks stays <= α under the
// normal approximation). The child is dropped when U + margin < 0; margin is
// 1e-6 for the blend fitness (its log-probability term lies in (0, 1e-6], so
// the race is on accuracy), else 0.
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

// Paired differences d_k of the first `m` units. `child` and `cutoff` are
// indexed by item (nullptr: not stored; every item of the first m units must
// be there). The gold_logprob fitness reads the log-probability, the others
// correctness.
std::vector<double> race_differences(const std::vector<std::vector<std::size_t>>& units, std::size_t m,
                                     const std::vector<double>& weights, const std::vector<std::size_t>& position_index,
                                     const std::vector<const SampleRecord*>& child,
                                     const std::vector<const SampleRecord*>& cutoff, FitnessKind fitness);

// The margin of race_bound for a fitness kind (see the header comment).
double race_margin(FitnessKind fitness);

}  // namespace midtune
