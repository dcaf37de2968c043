// The ask/tell strategies: LPES Algorithm 1 bookkeeping, determinism, and
// exact resumption from save_state() at any point.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "core/ga/factory.hpp"
#include "core/ga/ga_strategy.hpp"
#include "core/ga/lpes_space.hpp"
#include "core/ga/sweep_strategies.hpp"

namespace midtune {
namespace {

// A smooth synthetic objective on the per-layer scales: best when the
// curve follows a hill (1 at the ends, 2 in the middle).
double lpes_fitness(const Genome& genome) {
  const auto scales = lpes_layer_scales(LpesSpec{}, genome);
  double error = 0.0;
  for (std::size_t h = 0; h < scales.size(); ++h) {
    const double u = static_cast<double>(h) / (scales.size() - 1);
    const double target = 1.0 + 4.0 * u * (1.0 - u);
    error += (scales[h] - target) * (scales[h] - target);
  }
  return -error;
}

double mixed_fitness(const Genome& genome) {
  return -std::abs(genome[0] - 6) - std::abs(genome[1] - 1.3) + (genome[2] == 1 ? 0.5 : 0.0);
}

GenomeSpace mixed_space() {
  return GenomeSpace({IntGene{"layer", 0, 9}, FloatGene{"ratio", 1.0, 2.0, 0.1},
                      CategoricalGene{"kind", {"moses", "hourglass", "decay"}}},
                     [](const Genome& g) { return g[0] + g[1] <= 10.0; }, "layer + ratio <= 10");
}

struct Step {
  std::vector<Candidate> batch;
  std::vector<double> fitness;
  std::vector<std::int64_t> population;
};

bool same(const Candidate& a, const Candidate& b) {
  return a.id == b.id && a.genome == b.genome && a.origin == b.origin && a.parents == b.parents;
}

bool same_steps(const std::vector<Step>& a, const std::vector<Step>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].batch.size() != b[i].batch.size() || a[i].fitness != b[i].fitness ||
        a[i].population != b[i].population) {
      return false;
    }
    for (std::size_t j = 0; j < a[i].batch.size(); ++j) {
      if (!same(a[i].batch[j], b[i].batch[j])) return false;
    }
  }
  return true;
}

template <class Fitness>
std::vector<Step> run(Strategy& strategy, Fitness fitness, std::size_t max_steps = 1000) {
  std::vector<Step> steps;
  while (!strategy.done() && steps.size() < max_steps) {
    Step step;
    step.batch = strategy.ask();
    for (const Candidate& candidate : step.batch) step.fitness.push_back(fitness(candidate.genome));
    strategy.tell(step.fitness);
    step.population = strategy.population();
    steps.push_back(std::move(step));
  }
  return steps;
}

GaStrategyConfig small_lpes_config() {
  GaStrategyConfig config;  // Table 12 defaults, fewer generations to stay fast
  config.generations = 6;
  return config;
}

TEST(GaStrategy, InitialPopulationIsTheSeedAndItsMutants) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  GaStrategy ga(space, GaStrategyConfig{}, 1);
  EXPECT_EQ(ga.generation(), 0);
  const auto batch = ga.ask();
  ASSERT_EQ(batch.size(), 32u);  // N_ps
  EXPECT_EQ(batch[0].genome, (Genome{0, 1.5, 10, 1.5, 21, 1.5, 31, 1.5}));  // LPES eq. 8
  EXPECT_EQ(batch[0].origin, Origin::init);
  EXPECT_TRUE(batch[0].parents.empty());
  for (std::size_t i = 1; i < batch.size(); ++i) {
    EXPECT_EQ(batch[i].origin, Origin::mutation);
    EXPECT_EQ(batch[i].parents, std::vector<std::int64_t>{batch[0].id});
    EXPECT_TRUE(space.is_valid(batch[i].genome));
  }
  // Asking again without tell() repeats the batch.
  const auto again = ga.ask();
  ASSERT_EQ(again.size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) EXPECT_TRUE(same(again[i], batch[i]));
}

TEST(GaStrategy, FollowsAlgorithmOne) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  const GaStrategyConfig config = small_lpes_config();
  GaStrategy ga(space, config, 2);
  const auto steps = run(ga, lpes_fitness);
  ASSERT_EQ(steps.size(), static_cast<std::size_t>(config.generations + 1));
  EXPECT_TRUE(ga.done());
  EXPECT_TRUE(ga.ask().empty());

  std::map<std::int64_t, double> fitness_of;
  std::set<std::int64_t> ids;
  double previous_best = -INFINITY;
  for (std::size_t g = 0; g < steps.size(); ++g) {
    const Step& step = steps[g];
    std::vector<std::int64_t> previous = g == 0 ? std::vector<std::int64_t>{} : steps[g - 1].population;
    for (std::size_t i = 0; i < step.batch.size(); ++i) {
      const Candidate& candidate = step.batch[i];
      EXPECT_TRUE(ids.insert(candidate.id).second) << "id reused: " << candidate.id;
      EXPECT_TRUE(space.is_valid(candidate.genome)) << space.why_invalid(candidate.genome);
      fitness_of[candidate.id] = step.fitness[i];
      if (g > 0) {
        // Parents come from the previous population's best N_pa.
        std::vector<std::int64_t> ranked = previous;
        std::stable_sort(ranked.begin(), ranked.end(),
                         [&](auto a, auto b) { return fitness_of[a] > fitness_of[b]; });
        ranked.resize(12);
        for (std::int64_t parent : candidate.parents) {
          EXPECT_NE(std::find(ranked.begin(), ranked.end(), parent), ranked.end());
        }
        EXPECT_EQ(candidate.parents.size(), candidate.origin == Origin::crossover ? 2u : 1u);
      }
    }
    if (g == 0) {
      EXPECT_EQ(step.population.size(), 32u);
      continue;
    }
    // Batch: both children of up to N_cr crossovers plus N_mu mutants.
    EXPECT_GE(step.batch.size(), 20u);
    EXPECT_LE(step.batch.size(), 24u);
    // S_i = S_pa (12) ∪ one kept child per crossover (4) ∪ mutants (16).
    EXPECT_EQ(step.population.size(), 32u);
    std::vector<std::int64_t> ranked = previous;
    std::stable_sort(ranked.begin(), ranked.end(),
                     [&](auto a, auto b) { return fitness_of[a] > fitness_of[b]; });
    for (int p = 0; p < 12; ++p) {
      EXPECT_NE(std::find(step.population.begin(), step.population.end(), ranked[p]), step.population.end());
    }
    // Of two children with the same parents in one batch, only the fitter stays.
    std::map<std::vector<std::int64_t>, std::vector<std::size_t>> pairs;
    for (std::size_t i = 0; i < step.batch.size(); ++i) {
      if (step.batch[i].origin == Origin::crossover) pairs[step.batch[i].parents].push_back(i);
    }
    for (const auto& [parents, members] : pairs) {
      if (members.size() != 2) continue;
      const auto& a = step.batch[members[0]];
      const auto& b = step.batch[members[1]];
      const bool a_kept = std::count(step.population.begin(), step.population.end(), a.id) > 0;
      const bool b_kept = std::count(step.population.begin(), step.population.end(), b.id) > 0;
      EXPECT_NE(a_kept, b_kept);
      EXPECT_EQ(a_kept, fitness_of[a.id] >= fitness_of[b.id]);
    }
    // Parents survive, so the best never gets worse.
    double best = -INFINITY;
    for (std::int64_t id : step.population) best = std::max(best, fitness_of[id]);
    EXPECT_GE(best, previous_best);
    previous_best = best;
  }
  ASSERT_TRUE(ga.best());
  EXPECT_EQ(ga.best()->fitness, previous_best);
  EXPECT_GT(previous_best, lpes_fitness(*space.seed()));  // the search improved on eq. 8
}

TEST(GaStrategy, SameSeedSameHistoryOtherSeedOtherHistory) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  GaStrategy a(space, small_lpes_config(), 3);
  GaStrategy b(space, small_lpes_config(), 3);
  GaStrategy c(space, small_lpes_config(), 4);
  const auto history = run(a, lpes_fitness);
  EXPECT_TRUE(same_steps(history, run(b, lpes_fitness)));
  EXPECT_FALSE(same_steps(history, run(c, lpes_fitness)));
}

// Runs a fresh strategy to the end, saving and restoring into a new object
// after every tell() (and once between an ask() and its tell()).
template <class Make, class Fitness>
void expect_exact_resume(Make make, Fitness fitness) {
  auto reference = make();
  const auto expected = run(*reference, fitness);
  ASSERT_GT(expected.size(), 2u);
  for (std::size_t stop = 0; stop < expected.size(); ++stop) {
    auto first = make();
    auto head = run(*first, fitness, stop);
    if (stop == 1) first->ask();  // a pending batch must survive too
    const std::string saved = first->save_state().dump();
    auto resumed = make();
    resumed->load_state(nlohmann::json::parse(saved));
    EXPECT_EQ(resumed->generation(), first->generation());
    EXPECT_EQ(resumed->population(), first->population());
    auto tail = run(*resumed, fitness);
    head.insert(head.end(), tail.begin(), tail.end());
    EXPECT_TRUE(same_steps(head, expected)) << "resumed after step " << stop;
  }
}

TEST(GaStrategy, ResumesExactlyAfterAnyTell) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  expect_exact_resume([&] { return std::make_unique<GaStrategy>(space, small_lpes_config(), 5); },
                      lpes_fitness);
}

// patience: the search stops once that many offspring generations in a row
// told nothing above the best before them, and not sooner; the stall count
// survives save/load, so a resumed search stops at the same generation.
TEST(GaStrategy, PatienceStopsAStalledSearchAndResumesExactly) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  GaStrategyConfig config = small_lpes_config();
  config.generations = 12;
  config.patience = 2;
  // Fitness that improves through generation 2's ids and is flat after: a
  // plateau the GA cannot climb (every genome scores the same once its
  // candidate id is past the third batch).
  int plateau_from = 0;
  {
    GaStrategy probe(space, config, 9);
    for (int g = 0; g < 3; ++g) {
      const auto batch = probe.ask();
      plateau_from = static_cast<int>(batch.back().id) + 1;
      probe.tell(std::vector<double>(batch.size(), 0.0));
    }
  }
  // Rising through the first three batches, then capped below the best.
  auto fitness_by_id = [plateau_from](const Candidate& c) {
    return c.id < plateau_from ? static_cast<double>(c.id) : -1.0;
  };
  GaStrategy ga(space, config, 9);
  std::vector<Step> steps;
  while (!ga.done()) {
    Step step;
    step.batch = ga.ask();
    for (const Candidate& c : step.batch) step.fitness.push_back(fitness_by_id(c));
    ga.tell(step.fitness);
    step.population = ga.population();
    steps.push_back(std::move(step));
  }
  // Generations 0..2 raise the best; 3 and 4 do not: done after 5 batches.
  EXPECT_EQ(steps.size(), 5u);
  EXPECT_EQ(ga.generation(), 5);
  EXPECT_TRUE(ga.ask().empty());
  EXPECT_NE(ga.stop_reason().find("search.ga.patience: 2"), std::string::npos) << ga.stop_reason();

  GaStrategyConfig no_patience = config;
  no_patience.patience = 0;
  GaStrategy full(space, no_patience, 9);
  std::size_t batches = 0;
  while (!full.done()) {
    const auto batch = full.ask();
    std::vector<double> f;
    for (const Candidate& c : batch) f.push_back(fitness_by_id(c));
    full.tell(f);
    ++batches;
  }
  EXPECT_EQ(batches, 13u) << "without patience the GA runs all its generations";
  EXPECT_TRUE(full.stop_reason().empty());

  // Resumed after each tell: the same batches, the same stop.
  for (std::size_t stop = 1; stop < steps.size(); ++stop) {
    GaStrategy first(space, config, 9);
    for (std::size_t i = 0; i < stop; ++i) {
      const auto batch = first.ask();
      std::vector<double> f;
      for (const Candidate& c : batch) f.push_back(fitness_by_id(c));
      first.tell(f);
    }
    GaStrategy resumed(space, config, 9);
    resumed.load_state(nlohmann::json::parse(first.save_state().dump()));
    std::size_t more = 0;
    while (!resumed.done()) {
      const auto batch = resumed.ask();
      ASSERT_EQ(batch.size(), steps[stop + more].batch.size());
      for (std::size_t j = 0; j < batch.size(); ++j) EXPECT_TRUE(same(batch[j], steps[stop + more].batch[j]));
      std::vector<double> f;
      for (const Candidate& c : batch) f.push_back(fitness_by_id(c));
      resumed.tell(f);
      ++more;
    }
    EXPECT_EQ(stop + more, steps.size()) << "resumed after batch " << stop;
  }
}

TEST(GaStrategy, GenericGenomesWithConfigurableOperators) {
  const GenomeSpace space = mixed_space();
  const nlohmann::json config = {{"kind", "ga"},
                                 {"init", "random"},
                                 {"population_size", 16},
                                 {"parents", 6},
                                 {"generations", 5},
                                 {"mutants", 8},
                                 {"crossovers", 4},
                                 {"selection", "tournament"},
                                 {"elites", 2},
                                 {"mutation", {{"kind", "polynomial"}, {"rate", 0.5}}},
                                 {"crossover", {{"kind", "sbx"}, {"keep_fitter", false}}}};
  auto make = [&] { return make_strategy(space, config, 6); };
  auto strategy = make();
  const auto steps = run(*strategy, mixed_fitness);
  ASSERT_EQ(steps.size(), 6u);
  for (const Step& step : steps) {
    for (const Candidate& candidate : step.batch) EXPECT_TRUE(space.is_valid(candidate.genome));
  }
  // elites 2 + every valid crossover child (keep_fitter false) + 8 mutants.
  for (std::size_t g = 1; g < steps.size(); ++g) {
    EXPECT_EQ(steps[g].population.size(), 2 + steps[g].batch.size());
  }
  expect_exact_resume(make, mixed_fitness);
}

// The run loop's proposal memory with genomes as keys: everything asked in
// earlier batches (rebuilt from the history, as the run loop rebuilds it
// from the store) plus what the batch being built has proposed.
class GenomeMemory final : public ProposalMemory {
 public:
  explicit GenomeMemory(const std::vector<Step>& history) {
    for (const Step& step : history)
      for (const Candidate& c : step.batch) seen_.insert(c.genome);
  }
  bool known(const Genome& genome) const override { return seen_.count(genome) > 0; }
  void remember(const Genome& genome) override { seen_.insert(genome); }

 private:
  std::set<Genome> seen_;
};

template <class Fitness>
std::vector<Step> run_with_memory(Strategy& strategy, Fitness fitness, std::vector<Step> history = {},
                                  std::size_t max_steps = 1000) {
  std::vector<Step> steps;
  while (!strategy.done() && steps.size() < max_steps) {
    std::vector<Step> seen = history;
    seen.insert(seen.end(), steps.begin(), steps.end());
    GenomeMemory memory(seen);
    strategy.set_proposal_memory(&memory);
    Step step;
    step.batch = strategy.ask();
    strategy.set_proposal_memory(nullptr);
    for (const Candidate& candidate : step.batch) step.fitness.push_back(fitness(candidate.genome));
    strategy.tell(step.fitness);
    step.population = strategy.population();
    steps.push_back(std::move(step));
  }
  return steps;
}

// Genomes asked more than once over the whole history.
std::size_t repeated_genomes(const std::vector<Step>& steps) {
  std::set<Genome> seen;
  std::size_t repeats = 0;
  for (const Step& step : steps)
    for (const Candidate& c : step.batch) repeats += seen.insert(c.genome).second ? 0 : 1;
  return repeats;
}

TEST(GaStrategy, UniqueChildrenNeverRepeatAnEvaluatedGenomeWhereTheSpaceAllows) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  GaStrategyConfig plain = small_lpes_config();
  GaStrategyConfig unique = plain;
  unique.unique_children = true;
  // Off: Algorithm 1 as published re-proposes curves (mutants of the seed
  // collide at M_y 0.2), and a memory changes nothing.
  GaStrategy off(space, plain, 8), off_with_memory(space, plain, 8);
  const auto off_steps = run(off, lpes_fitness);
  EXPECT_GT(repeated_genomes(off_steps), 0u);
  EXPECT_TRUE(same_steps(off_steps, run_with_memory(off_with_memory, lpes_fitness)));
  // On: no genome twice, in a generation or across them, and every
  // generation still asks its configured number of candidates.
  GaStrategy on(space, unique, 8);
  const auto on_steps = run_with_memory(on, lpes_fitness);
  ASSERT_EQ(on_steps.size(), off_steps.size());
  EXPECT_EQ(repeated_genomes(on_steps), 0u);
  for (std::size_t g = 0; g < on_steps.size(); ++g) EXPECT_EQ(on_steps[g].batch.size(), off_steps[g].batch.size());
  // The option is part of the saved config: a checkpoint of one does not load into the other.
  EXPECT_THROW(GaStrategy(space, plain, 8).load_state(on.save_state()), std::invalid_argument);
}

TEST(GaStrategy, UniqueChildrenKeepTheLastDrawWhenTheSpaceIsExhausted) {
  // Two genomes in all: after generation 0 every child is known, so each is
  // drawn kMaxProposalDraws times and the last draw kept; sizes never shrink.
  const GenomeSpace space({IntGene{"bit", 0, 1}});
  const nlohmann::json config = {{"kind", "ga"},     {"init", "random"}, {"population_size", 4},
                                 {"parents", 2},     {"generations", 3}, {"mutants", 2},
                                 {"crossovers", 0},  {"unique_children", true},
                                 {"mutation", {{"kind", "uniform"}}}};
  auto strategy = make_strategy(space, config, 9);
  const auto steps = run_with_memory(*strategy, [](const Genome& g) { return g[0]; });
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].batch.size(), 4u);
  for (std::size_t g = 1; g < steps.size(); ++g) EXPECT_EQ(steps[g].batch.size(), 2u);
}

TEST(GaStrategy, UniqueChildrenResumeExactlyWithTheRebuiltMemory) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  GaStrategyConfig config = small_lpes_config();
  config.unique_children = true;
  GaStrategy reference(space, config, 10);
  const auto expected = run_with_memory(reference, lpes_fitness);
  for (std::size_t stop = 1; stop < expected.size(); ++stop) {
    GaStrategy first(space, config, 10);
    auto head = run_with_memory(first, lpes_fitness, {}, stop);
    GaStrategy resumed(space, config, 10);
    resumed.load_state(nlohmann::json::parse(first.save_state().dump()));
    auto tail = run_with_memory(resumed, lpes_fitness, head);
    head.insert(head.end(), tail.begin(), tail.end());
    EXPECT_TRUE(same_steps(head, expected)) << "resumed after step " << stop;
  }
}

// Racing's field: the first population races within itself for N_pa
// places; a later batch also against the parents Algorithm 1 carries, with
// each crossover pair kept by fitness as siblings; no race with tournament
// selection or elitism.
TEST(GaStrategy, RaceFieldIsTheParentPlacesTheBatchCompetesFor) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  const auto fields = [&](GaStrategyConfig config) {
    GaStrategy ga(space, config, 5);
    const std::vector<Candidate> first = ga.ask();
    const std::optional<RaceField> before = ga.race_field();
    std::vector<double> fitness;
    for (std::size_t i = 0; i < first.size(); ++i) fitness.push_back(static_cast<double>((i * 7) % first.size()));
    ga.tell(fitness);
    const std::vector<Candidate> second = ga.ask();
    std::vector<std::int64_t> parents;
    for (std::size_t i : truncation_select(fitness, static_cast<std::size_t>(config.parents)))
      parents.push_back(first[i].id);
    return std::make_tuple(before, ga.race_field(), parents, second);
  };
  GaStrategyConfig config = small_lpes_config();
  config.crossover.keep_fitter = true;
  ASSERT_GE(config.crossovers, 1);
  const auto [first, later, parents, batch] = fields(config);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->parents, config.parents);
  EXPECT_TRUE(first->carried.empty()) << "no parents yet";
  ASSERT_TRUE(later);
  EXPECT_EQ(later->parents, config.parents);
  EXPECT_EQ(later->carried, parents) << "the truncation pick, best first";
  ASSERT_EQ(later->sibling.size(), batch.size());
  int paired = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const int s = later->sibling[i];
    if (s < 0) continue;
    ++paired;
    EXPECT_EQ(later->sibling[static_cast<std::size_t>(s)], static_cast<int>(i));
    EXPECT_EQ(batch[i].origin, Origin::crossover);
    EXPECT_EQ(batch[i].parents, batch[static_cast<std::size_t>(s)].parents) << "children of one crossover";
  }
  EXPECT_GT(paired, 0);
  EXPECT_EQ(paired % 2, 0);
  GaStrategyConfig tournament = config;
  tournament.selection = SelectionKind::tournament;
  EXPECT_FALSE(std::get<1>(fields(tournament)));
  GaStrategyConfig elites = config;
  elites.elites = 2;
  EXPECT_FALSE(std::get<1>(fields(elites)));
}

TEST(GaStrategy, TellChecksItsInput) {
  GaStrategy ga(lpes_genome_space(LpesSpec{}), small_lpes_config(), 7);
  EXPECT_THROW(ga.tell({}), std::logic_error);
  const auto batch = ga.ask();
  EXPECT_THROW(ga.tell(std::vector<double>(batch.size() - 1, 0.0)), std::invalid_argument);
  std::vector<double> fitness(batch.size(), 0.5);
  fitness[3] = NAN;
  EXPECT_THROW(ga.tell(fitness), std::invalid_argument);
  fitness[3] = -INFINITY;  // a failed evaluation
  ga.tell(fitness);
  EXPECT_EQ(ga.generation(), 1);
  // -infinity survives the JSON round trip.
  GaStrategy restored(lpes_genome_space(LpesSpec{}), small_lpes_config(), 7);
  restored.load_state(nlohmann::json::parse(ga.save_state().dump()));
  EXPECT_EQ(restored.members()[3].fitness, -INFINITY);
}

TEST(GaStrategy, LoadStateRejectsForeignOrBrokenStates) {
  const GenomeSpace space = lpes_genome_space(LpesSpec{});
  GaStrategy ga(space, small_lpes_config(), 8);
  run(ga, lpes_fitness, 2);
  const nlohmann::json state = ga.save_state();
  GaStrategyConfig other = small_lpes_config();
  other.mutants = 10;
  GaStrategy different(space, other, 8);
  EXPECT_THROW(different.load_state(state), std::invalid_argument);
  GaStrategy target(space, small_lpes_config(), 8);
  nlohmann::json broken = state;
  broken["population"][0]["genome"][2] = 10.5;  // off the x grid
  EXPECT_THROW(target.load_state(broken), std::invalid_argument);
  broken = state;
  broken["strategy"] = "grid";
  EXPECT_THROW(target.load_state(broken), std::invalid_argument);
  broken = state;
  broken["rng"]["state"] = "garbage";
  EXPECT_THROW(target.load_state(broken), std::invalid_argument);
  EXPECT_EQ(target.generation(), 0);  // nothing half-loaded
  EXPECT_TRUE(target.population().empty());
}

TEST(GaStrategyConfig, PaperNamesDefaultsAndErrors) {
  const GaStrategyConfig defaults;
  EXPECT_EQ(defaults.population_size, 32);
  EXPECT_EQ(defaults.parents, 12);
  EXPECT_EQ(defaults.generations, 20);
  EXPECT_EQ(defaults.mutants, 16);
  EXPECT_EQ(defaults.crossovers, 4);
  EXPECT_EQ(defaults.crossover.max_tries, 4);
  EXPECT_EQ(defaults.mutation.max_dx, 2.0);
  EXPECT_EQ(defaults.mutation.max_dy, 0.2);
  const auto paper = nlohmann::json{{"N_ps", 20}, {"N_pa", 8}, {"T", 3}, {"N_mu", 10}, {"N_cr", 2},
                                    {"N_ct", 6}, {"M_x", 1}, {"M_y", 0.1}}
                         .get<GaStrategyConfig>();
  EXPECT_EQ(paper.population_size, 20);
  EXPECT_EQ(paper.crossover.max_tries, 6);
  EXPECT_EQ(paper.mutation.max_dy, 0.1);
  EXPECT_EQ(nlohmann::json(paper).get<GaStrategyConfig>(), paper);
  EXPECT_THROW((nlohmann::json{{"N_pa", 40}}.get<GaStrategyConfig>()), std::invalid_argument);
  EXPECT_THROW((nlohmann::json{{"populaton_size", 4}}.get<GaStrategyConfig>()), std::invalid_argument);
  EXPECT_EQ(defaults.patience, 0);
  EXPECT_FALSE(nlohmann::json(defaults).contains("patience")) << "absent when off: older checkpoints keep their config";
  const auto patient = nlohmann::json{{"patience", 3}}.get<GaStrategyConfig>();
  EXPECT_EQ(patient.patience, 3);
  EXPECT_EQ(nlohmann::json(patient).get<GaStrategyConfig>(), patient);
  EXPECT_THROW((nlohmann::json{{"patience", -1}}.get<GaStrategyConfig>()), std::invalid_argument);
  // LPES mutation on a space without control points is refused up front.
  EXPECT_THROW(GaStrategy(mixed_space(), GaStrategyConfig{}, 1), std::invalid_argument);
  GaStrategyConfig random_init;
  random_init.init = InitKind::seed_mutants;
  random_init.mutation.kind = MutationKind::uniform;
  EXPECT_THROW(GaStrategy(mixed_space(), random_init, 1), std::invalid_argument);  // no seed
  random_init.initial_genome = nlohmann::json{{"layer", 2}, {"ratio", 1.5}, {"kind", "decay"}};
  GaStrategy seeded(mixed_space(), random_init, 1);
  EXPECT_EQ(seeded.ask()[0].genome, (Genome{2, 1.5, 2}));
}

TEST(GridStrategy, CartesianProductInOrderSkippingInvalid) {
  const GenomeSpace space = mixed_space();
  GridConfig config;
  config.values = {{"layer", {8, 9}}, {"ratio", {1.0, 2.0}}, {"kind", {"decay"}}};
  config.batch_size = 2;
  GridStrategy grid(space, config);
  EXPECT_EQ(grid.total_points(), 4);
  const auto steps = run(grid, mixed_fitness);
  std::vector<Genome> seen;
  for (const Step& step : steps) {
    for (const Candidate& candidate : step.batch) {
      EXPECT_EQ(candidate.origin, Origin::grid);
      seen.push_back(candidate.genome);
    }
  }
  // (9, 2.0) breaks layer + ratio <= 10 and is skipped.
  EXPECT_EQ(seen, (std::vector<Genome>{{8, 1.0, 2}, {8, 2.0, 2}, {9, 1.0, 2}}));
  EXPECT_EQ(steps.size(), 2u);
  EXPECT_TRUE(grid.done());
}

TEST(GridStrategy, DoneIsExactWhenTheRestIsInvalid) {
  GridConfig config;
  config.values = {{"layer", {9}}, {"ratio", {1.0, 1.1, 1.2}}, {"kind", {"moses"}}};
  config.batch_size = 1;
  GridStrategy grid(mixed_space(), config);  // only (9, 1.0) satisfies layer + ratio <= 10
  ASSERT_FALSE(grid.done());
  EXPECT_EQ(grid.ask().size(), 1u);
  grid.tell({0.0});
  EXPECT_TRUE(grid.done());
  config.values["ratio"] = {1.5};
  EXPECT_TRUE(GridStrategy(mixed_space(), config).done());
}

TEST(GridStrategy, UnlistedGenesSweepTheirWholeGrid) {
  GridConfig config;
  config.values = {{"kind", {"moses"}}, {"layer", {0}}};
  GridStrategy grid(mixed_space(), config);
  EXPECT_EQ(grid.total_points(), 11);
  auto make = [&] { return std::make_unique<GridStrategy>(mixed_space(), GridConfig{{}, 7}); };
  expect_exact_resume(make, mixed_fitness);
}

TEST(GridStrategy, RejectsUnknownOrOffGridValues) {
  GridConfig config;
  config.values = {{"ratio", {1.05}}};
  EXPECT_THROW(GridStrategy(mixed_space(), config), std::invalid_argument);
  config.values = {{"kind", {"linear"}}};
  EXPECT_THROW(GridStrategy(mixed_space(), config), std::invalid_argument);
  config.values = {{"rato", {1.0}}};
  EXPECT_THROW(GridStrategy(mixed_space(), config), std::invalid_argument);
  EXPECT_THROW(GridStrategy(lpes_genome_space(LpesSpec{}), GridConfig{{}, 32, 1000}), std::invalid_argument);
}

TEST(RandomStrategy, CountValidDrawsInBatchesAndResumes) {
  const GenomeSpace space = mixed_space();
  RandomStrategy random(space, RandomConfig{10, 4}, 9);
  const auto steps = run(random, mixed_fitness);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[2].batch.size(), 2u);
  for (const Step& step : steps) {
    for (const Candidate& candidate : step.batch) {
      EXPECT_TRUE(space.is_valid(candidate.genome));
      EXPECT_EQ(candidate.origin, Origin::random);
    }
  }
  expect_exact_resume([&] { return std::make_unique<RandomStrategy>(space, RandomConfig{10, 4}, 9); },
                      mixed_fitness);
}

TEST(Factory, BuildsEachKindAndNamesMistakes) {
  const GenomeSpace space = mixed_space();
  EXPECT_NE(dynamic_cast<GridStrategy*>(make_strategy(space, {{"kind", "grid"}}, 0).get()), nullptr);
  EXPECT_NE(dynamic_cast<RandomStrategy*>(make_strategy(space, {{"kind", "random"}, {"count", 3}}, 0).get()),
            nullptr);
  EXPECT_NE(dynamic_cast<GaStrategy*>(make_strategy(lpes_genome_space(LpesSpec{}), {{"kind", "ga"}}, 0).get()),
            nullptr);
  try {
    make_strategy(space, {{"kind", "gaa"}}, 0);
    ADD_FAILURE();
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("gaa"), std::string::npos);
  }
  EXPECT_THROW(make_strategy(space, {{"count", 3}}, 0), std::invalid_argument);
  EXPECT_THROW(make_strategy(space, {{"kind", "random"}, {"cout", 3}}, 0), std::invalid_argument);
  EXPECT_EQ(origin_from_string("crossover"), Origin::crossover);
  EXPECT_THROW(origin_from_string("clone"), std::invalid_argument);
}

}  // namespace
}  // namespace midtune
