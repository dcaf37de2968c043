// The search's fitness kinds and Pareto objectives on outcomes worked by
// hand: the λ-weighted mean gold log-probability, the blend's tie-break
// (never an accuracy reversal), and each objective name's value.
#include "core/search/fitness.hpp"

#include <cmath>

#include <gtest/gtest.h>

namespace midtune {
namespace {

// Accuracy-only objective with the LPES λ (0.2, 0.3, 0.5).
class Weighted : public Objective {
 public:
  std::string name() const override { return "weighted"; }
  const GenomeSpace& space() const override { return space_; }
  Intervention decode(const Genome&) const override { return {}; }
  double fitness(const std::vector<metrics::PositionAccuracy>& s) const override {
    return metrics::bucket_fitness(s, {});
  }

 private:
  GenomeSpace space_{{FloatGene{"x", 0.0, 1.0, 0.5}}};
};

SampleRecord sample(const std::string& id, double position, bool correct, double logprob) {
  SampleRecord s;
  s.sample_id = id;
  s.gold_position = position;
  s.correct = correct;
  s.gold_logprob = logprob;
  return s;
}

// Four positions, two items each: accuracy 1/2, 0/2, 2/2, 1/2.
std::vector<PositionScore> scores() {
  return {{0.0, 0.5, 1, 2}, {1.0 / 3, 0.0, 0, 2}, {2.0 / 3, 1.0, 2, 2}, {1.0, 0.5, 1, 2}};
}

std::vector<SampleRecord> samples() {
  return {sample("a0", 0.0, true, -1.0),     sample("a1", 0.0, false, -3.0),      // mean -2
          sample("b0", 1.0 / 3, false, -4.0), sample("b1", 1.0 / 3, false, -6.0),  // mean -5
          sample("c0", 2.0 / 3, true, -0.5),  sample("c1", 2.0 / 3, true, -1.5),   // mean -1
          sample("d0", 1.0, true, -0.25),     sample("d1", 1.0, false, -0.75)};    // mean -0.5
}

TEST(SearchFitness, GoldLogprobIsTheLambdaWeightedMeanPerPosition) {
  const PositionOutcomes outcomes = position_outcomes(scores(), samples());
  ASSERT_EQ(outcomes.mean_gold_logprob, (std::vector<double>{-2.0, -5.0, -1.0, -0.5}));
  const Weighted objective;
  SearchScoring scoring;
  // accuracy: 0.2·0.5 + 0.3·(0 + 1)/2 + 0.5·0.5 = 0.5, the objective's own fitness.
  EXPECT_DOUBLE_EQ(search_fitness(scoring, objective, outcomes), 0.5);
  EXPECT_EQ(search_fitness(scoring, objective, outcomes), objective.fitness(outcomes.accuracy));
  // gold_logprob: 0.2·(−2) + 0.3·(−5 − 1)/2 + 0.5·(−0.5) = −0.4 − 0.9 − 0.25 = −1.55.
  scoring.fitness = FitnessKind::gold_logprob;
  EXPECT_DOUBLE_EQ(search_fitness(scoring, objective, outcomes), -1.55);
  // blend: 0.5 + 1e-6 / (1 + 1.55).
  scoring.fitness = FitnessKind::blend;
  EXPECT_DOUBLE_EQ(search_fitness(scoring, objective, outcomes), 0.5 + 1e-6 / 2.55);
}

TEST(SearchFitness, BlendBreaksAccuracyTiesByLogprobAndNeverReversesAccuracy) {
  const Weighted objective;
  SearchScoring blend;
  blend.fitness = FitnessKind::blend;
  const auto with_logprob_shift = [](double shift) {
    std::vector<SampleRecord> s = samples();
    for (SampleRecord& x : s) *x.gold_logprob += shift;
    return s;
  };
  // Same accuracy, higher log-probability: higher blend.
  const double sure = search_fitness(blend, objective, position_outcomes(scores(), with_logprob_shift(0.4)));
  const double unsure = search_fitness(blend, objective, position_outcomes(scores(), with_logprob_shift(-30)));
  EXPECT_GT(sure, unsure);
  // One more item right at the end (+0.25 accuracy fitness) beats any log-probability.
  std::vector<PositionScore> better = scores();
  better[3] = {1.0, 1.0, 2, 2};
  std::vector<SampleRecord> hopeless = with_logprob_shift(-1e9);
  const double more_accurate = search_fitness(blend, objective, position_outcomes(better, hopeless));
  EXPECT_GT(more_accurate, sure);
  EXPECT_NEAR(more_accurate, 0.75, 1e-6);
}

TEST(SearchFitness, LogprobKindsNeedTeacherForcedSamples) {
  std::vector<SampleRecord> generated = samples();
  for (SampleRecord& s : generated) s.gold_logprob.reset();
  const PositionOutcomes outcomes = position_outcomes(scores(), generated);
  EXPECT_TRUE(outcomes.mean_gold_logprob.empty());
  SearchScoring scoring;
  scoring.fitness = FitnessKind::gold_logprob;
  EXPECT_THROW(search_fitness(scoring, Weighted(), outcomes), std::invalid_argument);
  EXPECT_TRUE(scoring.needs_samples());
  EXPECT_FALSE(SearchScoring{}.needs_samples());
  EXPECT_EQ(fitness_kind_from_string("blend"), FitnessKind::blend);
  EXPECT_THROW(fitness_kind_from_string("loss"), std::invalid_argument);
}

TEST(ParetoObjectives, EachNameReadsItsPart) {
  const PositionOutcomes outcomes = position_outcomes(scores(), samples());
  SearchScoring scoring;
  scoring.objectives = {"accuracy_beginning", "accuracy_middle", "accuracy_end", "accuracy_mean", "neg_gap"};
  EXPECT_EQ(pareto_objectives(scoring, outcomes), (std::vector<double>{0.5, 0.5, 0.5, 0.5, -1.0}));
  EXPECT_FALSE(scoring.needs_samples());
  scoring.objectives = {"logprob_beginning", "logprob_middle", "logprob_end", "logprob_mean", "logprob_neg_gap"};
  EXPECT_EQ(pareto_objectives(scoring, outcomes), (std::vector<double>{-2.0, -3.0, -0.5, -2.125, -4.5}));
  EXPECT_TRUE(scoring.needs_samples());
  // Every name the experiment file accepts has a value here.
  scoring.objectives = search_objectives();
  EXPECT_EQ(pareto_objectives(scoring, outcomes).size(), search_objectives().size());
  EXPECT_EQ(pareto_objective_names(), search_objectives());
  scoring.objectives = {"middle"};
  try {
    pareto_objectives(scoring, outcomes);
    FAIL() << "expected an unknown-objective error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("accuracy_middle"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace midtune
