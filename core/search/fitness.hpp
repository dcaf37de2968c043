// What a search maximises, from one evaluation's per-position outcomes:
//
//   accuracy      F_acc = λ_B a_B + λ_M mean a_M + λ_E a_E (LPES eq. 9, the
//                 objective's own fitness; the default).
//   gold_logprob  F_lp  = λ_B ℓ_B + λ_M mean ℓ_M + λ_E ℓ_E, with ℓ_p the mean
//                 over the samples at position p of the teacher-forced gold
//                 log-probability (sum of log p(gold token), nats, <= 0).
//                 Continuous, so curves that tie on 15 items per bucket
//                 still differ.
//   blend         F_acc + 1e-6 / (1 − F_lp): accuracy first; equal
//                 accuracies are ordered by log-probability (the term lies
//                 in (0, 1e-6] and grows with F_lp), and an accuracy order
//                 only changes where two F_acc differ by less than 1e-6.
//
// And the objectives a Pareto search (nsga2) maximises, two or three of:
// accuracy_beginning | accuracy_middle | accuracy_end | accuracy_mean |
// neg_gap (−(best − worst position accuracy)), and the same over ℓ:
// logprob_beginning | logprob_middle | logprob_end | logprob_mean |
// logprob_neg_gap. Accuracies in [0, 1].
#pragma once

#include <string>
#include <vector>

#include "objectives/metrics.hpp"
#include "objectives/objective.hpp"
#include "schema/store.hpp"

namespace midtune {

// Per-position outcomes of one evaluation, in gold-position order.
struct PositionOutcomes {
  std::vector<metrics::PositionAccuracy> accuracy;
  // Mean gold log-probability per position; empty when the samples carry
  // none (generate metric).
  std::vector<double> mean_gold_logprob;
};

// A sample stores its gold depth (the chunk the gold landed in), not the
// listed position it was drawn for; the slice puts the gold at the chunk
// nearest the listed fraction, so the nearest listed position is its own.
// Index into `listed` (not empty).
std::size_t listed_position_of(const std::vector<double>& listed, double gold_depth);

// `samples` may be empty when no log-probability is needed.
PositionOutcomes position_outcomes(const std::vector<PositionScore>& scores, const std::vector<SampleRecord>& samples);

enum class FitnessKind { accuracy, gold_logprob, blend };
const std::vector<std::string>& fitness_kinds();
FitnessKind fitness_kind_from_string(const std::string& name);  // throws std::invalid_argument
// Whether a kind (or an objective name) reads the samples' log-probabilities.
bool needs_logprob(FitnessKind kind);
bool needs_logprob(const std::string& objective_name);

struct SearchScoring {
  FitnessKind fitness = FitnessKind::accuracy;
  metrics::BucketWeights weights;  // the objective's λ (for gold_logprob and blend)
  // nsga2: the objectives, in the file's order; empty for a scalar search.
  std::vector<std::string> objectives;
  bool needs_samples() const;
};

// The scalar fitness (accuracy: objective.fitness(), bit for bit as before).
double search_fitness(const SearchScoring& scoring, const Objective& objective, const PositionOutcomes& outcomes);

const std::vector<std::string>& pareto_objective_names();
// One value per scoring.objectives entry; throws std::invalid_argument for
// an unknown name or a log-probability objective without log-probabilities.
std::vector<double> pareto_objectives(const SearchScoring& scoring, const PositionOutcomes& outcomes);

}  // namespace midtune
