#include "core/ga/ga_strategy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include "core/ga/state_json.hpp"

namespace midtune {
namespace {

const ConfigFields kFields("ga");

const char* to_string(InitKind kind) {
  return kind == InitKind::seed_mutants ? "seed_mutants" : "random";
}

InitKind init_kind_from_string(const std::string& name) {
  if (name == "seed_mutants") return InitKind::seed_mutants;
  if (name == "random") return InitKind::random;
  kFields.fail("init", "unknown '" + name + "' (expected seed_mutants or random)");
}

}  // namespace

void GaStrategyConfig::validate() const {
  if (population_size < 1) kFields.fail("population_size", "must be >= 1");
  if (parents < 1 || parents > population_size) kFields.fail("parents", "must be in 1..population_size");
  if (generations < 0) kFields.fail("generations", "must be >= 0");
  if (mutants < 0) kFields.fail("mutants", "must be >= 0");
  if (crossovers < 0) kFields.fail("crossovers", "must be >= 0");
  if (generations > 0 && mutants + crossovers < 1) {
    kFields.fail("mutants", "mutants + crossovers must be >= 1 to make offspring");
  }
  if (tournament_size < 1) kFields.fail("tournament_size", "must be >= 1");
  if (elites < -1) kFields.fail("elites", "must be -1 (the parent pool) or >= 0");
  if (patience < 0) kFields.fail("patience", "must be >= 0 (0: no early stop)");
  if (initial_genome && !initial_genome->is_object()) {
    kFields.fail("initial_genome", "must be an object keyed by gene name");
  }
  mutation.validate();
  crossover.validate();
}

void to_json(nlohmann::json& out, const GaStrategyConfig& config) {
  out = {{"population_size", config.population_size},
         {"parents", config.parents},
         {"generations", config.generations},
         {"mutants", config.mutants},
         {"crossovers", config.crossovers},
         {"selection", to_string(config.selection)},
         {"tournament_size", config.tournament_size},
         {"elites", config.elites},
         {"init", to_string(config.init)},
         {"mutation", config.mutation},
         {"crossover", config.crossover}};
  out["initial_genome"] = config.initial_genome ? *config.initial_genome : nlohmann::json(nullptr);
  // Absent when off, so checkpoints saved before the option still load.
  if (config.unique_children) out["unique_children"] = true;
  if (config.patience > 0) out["patience"] = config.patience;
}

void from_json(const nlohmann::json& in, GaStrategyConfig& config) {
  if (!in.is_object()) throw std::invalid_argument("ga: expected an object");
  for (const auto& [key, value] : in.items()) {
    if (key == "kind") {
      if (value != "ga") kFields.fail(key, "must be \"ga\"");
    } else if (key == "population_size" || key == "N_ps") {
      config.population_size = kFields.integer(key, value);
    } else if (key == "parents" || key == "N_pa") {
      config.parents = kFields.integer(key, value);
    } else if (key == "generations" || key == "T") {
      config.generations = kFields.integer(key, value);
    } else if (key == "mutants" || key == "N_mu") {
      config.mutants = kFields.integer(key, value);
    } else if (key == "crossovers" || key == "N_cr") {
      config.crossovers = kFields.integer(key, value);
    } else if (key == "N_ct") {
      config.crossover.max_tries = kFields.integer(key, value);
    } else if (key == "M_x" || key == "M_y") {
      if (!value.is_number()) kFields.fail(key, "must be a number");
      (key == "M_x" ? config.mutation.max_dx : config.mutation.max_dy) = value.get<double>();
    } else if (key == "selection") {
      if (!value.is_string()) kFields.fail(key, "must be a string");
      config.selection = selection_kind_from_string(value.get<std::string>());
    } else if (key == "tournament_size") {
      config.tournament_size = kFields.integer(key, value);
    } else if (key == "elites") {
      config.elites = kFields.integer(key, value);
    } else if (key == "init") {
      if (!value.is_string()) kFields.fail(key, "must be a string");
      config.init = init_kind_from_string(value.get<std::string>());
    } else if (key == "initial_genome") {
      config.initial_genome = value.is_null() ? std::nullopt : std::optional(value);
    } else if (key == "unique_children") {
      if (!value.is_boolean()) kFields.fail(key, "must be true or false");
      config.unique_children = value.get<bool>();
    } else if (key == "patience") {
      config.patience = kFields.integer(key, value);
    } else if (key == "mutation") {
      value.get_to(config.mutation);
    } else if (key == "crossover") {
      value.get_to(config.crossover);
    } else {
      kFields.fail(key, "is not a field (expected population_size|N_ps, parents|N_pa, generations|T, "
                "mutants|N_mu, crossovers|N_cr, N_ct, M_x, M_y, selection, tournament_size, "
                "elites, init, initial_genome, unique_children, patience, mutation, crossover)");
    }
  }
  config.validate();
}

GaStrategy::GaStrategy(GenomeSpace space, GaStrategyConfig config, std::uint64_t seed)
    : space_(std::move(space)), config_(std::move(config)), rng_(seed) {
  config_.validate();
  if (config_.mutation.kind == MutationKind::lpes && !space_.control_points()) {
    kFields.fail("mutation.kind", "lpes mutation needs a control-point genome space (LPES); use "
                          "uniform, gaussian or polynomial for this space");
  }
  if (config_.init == InitKind::seed_mutants) {
    if (config_.initial_genome) {
      space_.set_seed(space_.from_json(*config_.initial_genome));
    } else if (!space_.seed()) {
      kFields.fail("init", "seed_mutants needs a starting genome: the genome space has none; set "
                   "ga.initial_genome or use init: random");
    }
  }
}

Candidate GaStrategy::new_candidate(Genome genome, Origin origin, std::vector<std::int64_t> parents) {
  return next_candidate(next_id_, std::move(genome), origin, std::move(parents));
}

Genome GaStrategy::mutant_of(const Genome& parent) { return mutate(space_, parent, config_.mutation, rng_); }

GaStrategy::Proposal GaStrategy::draw_proposal(std::function<Proposal()> draw) {
  return draw_unique<Proposal>(config_.unique_children, draw, [](const Proposal& p) { return p.genomes; });
}

void GaStrategy::make_initial_batch() {
  const auto size = static_cast<std::size_t>(config_.population_size);
  if (config_.init == InitKind::random) {
    for (std::size_t n = 0; n < size; ++n) {
      Proposal drawn = draw_proposal([&] { return Proposal{{space_.random_genome(rng_)}, Origin::init, {}}; });
      pending_.push_back({new_candidate(drawn.genomes.front(), Origin::init, {}), -1});
    }
    return;
  }
  // LPES: the eq. 8 individual, then mutants of it up to N_ps.
  const Candidate seed = new_candidate(*space_.seed(), Origin::init, {});
  draw_proposal([&] { return Proposal{{seed.genome}, Origin::init, {}}; });  // the memory learns the seed
  pending_.push_back({seed, -1});
  while (pending_.size() < size) {
    Proposal drawn = draw_proposal([&] { return Proposal{{mutant_of(seed.genome)}, Origin::mutation, {seed.id}}; });
    pending_.push_back({new_candidate(drawn.genomes.front(), Origin::mutation, {seed.id}), -1});
  }
}

void GaStrategy::make_offspring_batch() {
  std::vector<double> fitness;
  for (const Individual& individual : population_) fitness.push_back(individual.fitness);
  const auto pool_size = static_cast<std::size_t>(config_.parents);
  // Algorithm 1 line 4: Select-Parents.
  const std::vector<std::size_t> picked =
      config_.selection == SelectionKind::truncation
          ? truncation_select(fitness, pool_size)
          : tournament_select(fitness, pool_size, config_.tournament_size, rng_);
  std::vector<const Individual*> pool;
  for (std::size_t position : picked) pool.push_back(&population_[position]);

  carried_.clear();
  std::set<std::int64_t> carried_ids;
  const std::vector<std::size_t> kept =
      config_.elites < 0 ? picked : elites(fitness, static_cast<std::size_t>(config_.elites));
  for (std::size_t position : kept) {
    if (carried_ids.insert(population_[position].candidate.id).second) {
      carried_.push_back(population_[position]);
    }
  }

  // Algorithm 1 line 5: N_cr crossovers of two distinct random parents.
  const auto draw_crossover = [&] {
    const std::size_t first = rng_.index(pool.size());
    std::size_t second = first;
    if (pool.size() > 1) {
      second = rng_.index(pool.size() - 1);
      if (second >= first) ++second;
    }
    const Candidate& a = pool[first]->candidate;
    const Candidate& b = pool[second]->candidate;
    std::vector<Genome> children = crossover(space_, a.genome, b.genome, config_.crossover, rng_);
    if (children.empty()) {  // no valid child in N_ct tries: a mutant keeps the size
      return Proposal{{mutant_of(a.genome)}, Origin::mutation, {a.id}};
    }
    return Proposal{std::move(children), Origin::crossover, {a.id, b.id}};
  };
  for (int pair = 0; pair < config_.crossovers; ++pair) {
    const Proposal drawn = draw_proposal(draw_crossover);
    for (const Genome& child : drawn.genomes) {
      const bool paired = drawn.origin == Origin::crossover && config_.crossover.keep_fitter;
      pending_.push_back({new_candidate(child, drawn.origin, drawn.parents), paired ? pair : -1});
    }
  }
  // Algorithm 1 line 6: N_mu mutants of random parents.
  const auto draw_mutant = [&] {
    const Candidate& parent = pool[rng_.index(pool.size())]->candidate;
    return Proposal{{mutant_of(parent.genome)}, Origin::mutation, {parent.id}};
  };
  for (int n = 0; n < config_.mutants; ++n) {
    const Proposal drawn = draw_proposal(draw_mutant);
    pending_.push_back({new_candidate(drawn.genomes.front(), drawn.origin, drawn.parents), -1});
  }
}

std::vector<Candidate> GaStrategy::ask() {
  if (done()) return {};
  if (!has_pending_) {
    pending_.clear();
    if (generation_ == 0) {
      make_initial_batch();
    } else {
      make_offspring_batch();
    }
    has_pending_ = true;
  }
  std::vector<Candidate> batch;
  for (const Pending& pending : pending_) batch.push_back(pending.candidate);
  return batch;
}

void GaStrategy::tell(const std::vector<double>& fitness) {
  if (!has_pending_) throw std::logic_error("ga: tell() without a pending ask()");
  if (fitness.size() != pending_.size()) {
    throw std::invalid_argument("ga: tell() got " + std::to_string(fitness.size()) +
                                " fitness values for " + std::to_string(pending_.size()) +
                                " candidates");
  }
  for (std::size_t i = 0; i < fitness.size(); ++i) {
    if (std::isnan(fitness[i])) {
      throw std::invalid_argument("ga: fitness of candidate " + std::to_string(pending_[i].candidate.id) +
                                  " is NaN (report a failed evaluation as -infinity)");
    }
  }
  std::vector<Individual> next = generation_ == 0 ? std::vector<Individual>{} : carried_;
  // Keep the fitter child of each crossover pair (ties: the first child).
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const int pair = pending_[i].pair;
    if (pair >= 0) {
      bool beaten = false;
      for (std::size_t j = 0; j < pending_.size(); ++j) {
        if (j == i || pending_[j].pair != pair) continue;
        if (fitness[j] > fitness[i] || (fitness[j] == fitness[i] && j < i)) beaten = true;
      }
      if (beaten) continue;
    }
    next.push_back({pending_[i].candidate, fitness[i]});
  }
  population_ = std::move(next);  // Algorithm 1 line 7
  const double batch_best = fitness.empty() ? -std::numeric_limits<double>::infinity()
                                            : *std::max_element(fitness.begin(), fitness.end());
  if (batch_best > best_told_) {
    best_told_ = batch_best;
    stale_generations_ = 0;
  } else if (generation_ > 0) {
    ++stale_generations_;
  }
  carried_.clear();
  pending_.clear();
  has_pending_ = false;
  ++generation_;
}

bool GaStrategy::done() const {
  return generation_ > config_.generations || (config_.patience > 0 && stale_generations_ >= config_.patience);
}

std::string GaStrategy::stop_reason() const {
  if (generation_ > config_.generations || config_.patience == 0 || stale_generations_ < config_.patience) return {};
  return "no fitness above " + std::to_string(best_told_) + " in the last " + std::to_string(stale_generations_) +
         " generations (search.ga.patience: " + std::to_string(config_.patience) + ")";
}

std::optional<RaceField> GaStrategy::race_field() const {
  if (!has_pending_) return std::nullopt;
  if (config_.selection != SelectionKind::truncation || config_.elites >= 0) return std::nullopt;
  RaceField field;
  field.parents = config_.parents;
  for (const Individual& parent : carried_) field.carried.push_back(parent.candidate.id);
  field.sibling.assign(pending_.size(), -1);
  for (std::size_t i = 0; i < pending_.size(); ++i)
    for (std::size_t j = 0; j < pending_.size(); ++j)
      if (i != j && pending_[i].pair >= 0 && pending_[j].pair == pending_[i].pair) field.sibling[i] = static_cast<int>(j);
  return field;
}

std::vector<std::int64_t> GaStrategy::population() const {
  std::vector<std::int64_t> ids;
  for (const Individual& individual : population_) ids.push_back(individual.candidate.id);
  return ids;
}

std::optional<Individual> GaStrategy::best() const {
  std::vector<double> fitness;
  for (const Individual& individual : population_) fitness.push_back(individual.fitness);
  const std::vector<std::size_t> top = truncation_select(fitness, 1);
  if (top.empty()) return std::nullopt;
  return population_[top.front()];
}

nlohmann::json GaStrategy::save_state() const {
  auto individuals = [](const std::vector<Individual>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const Individual& individual : list) {
      nlohmann::json item = candidate_to_json(individual.candidate);
      item["fitness"] = fitness_to_json(individual.fitness);
      out.push_back(std::move(item));
    }
    return out;
  };
  nlohmann::json pending = nlohmann::json::array();
  for (const Pending& item : pending_) {
    nlohmann::json entry = candidate_to_json(item.candidate);
    entry["pair"] = item.pair;
    pending.push_back(std::move(entry));
  }
  return {{"strategy", "ga"},
          {"version", 1},
          {"config", config_},
          {"genome_size", space_.size()},
          {"rng", rng_.save()},
          {"generation", generation_},
          {"next_id", next_id_},
          {"population", individuals(population_)},
          {"carried", individuals(carried_)},
          {"pending", pending},
          {"has_pending", has_pending_},
          {"best_told", fitness_to_json(best_told_)},
          {"stale_generations", stale_generations_}};
}

void GaStrategy::load_state(const nlohmann::json& state) {
  StateReader reader("ga", state, nlohmann::json(config_), space_);
  auto individuals = [&](const char* key) {
    std::vector<Individual> list;
    for (const nlohmann::json& item : reader.array(key)) {
      list.push_back({reader.candidate(item), reader.fitness(item)});
    }
    return list;
  };
  Rng rng;
  rng.load(reader.field("rng"));
  std::vector<Individual> population = individuals("population");
  std::vector<Individual> carried = individuals("carried");
  std::vector<Pending> pending;
  for (const nlohmann::json& item : reader.array("pending")) {
    pending.push_back({reader.candidate(item), static_cast<int>(reader.integer(item, "pair"))});
  }
  // States saved before patience existed lack the two fields; their
  // experiments have patience 0, which never reads them.
  double best_told = -std::numeric_limits<double>::infinity();
  int stale_generations = 0;
  if (state.contains("best_told")) {
    best_told = reader.fitness({{"fitness", state["best_told"]}});
    stale_generations = static_cast<int>(reader.integer(state, "stale_generations"));
  }
  // Commit only after everything parsed, so a bad state changes nothing.
  best_told_ = best_told;
  stale_generations_ = stale_generations;
  rng_ = rng;
  generation_ = static_cast<int>(reader.integer(state, "generation"));
  next_id_ = reader.integer(state, "next_id");
  population_ = std::move(population);
  carried_ = std::move(carried);
  pending_ = std::move(pending);
  has_pending_ = reader.boolean("has_pending");
}

}  // namespace midtune
