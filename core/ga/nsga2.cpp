#include "core/ga/nsga2.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/ga/state_json.hpp"

namespace midtune {
namespace {

const ConfigFields kFields("nsga2");

// a dominates b: no worse in every objective, better in one (maximisation).
bool dominates(const std::vector<double>& a, const std::vector<double>& b) {
  bool better = false;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (a[k] < b[k]) return false;
    if (a[k] > b[k]) better = true;
  }
  return better;
}

nlohmann::json objectives_to_json(const std::vector<double>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (double v : values) out.push_back(fitness_to_json(v));
  return out;
}

}  // namespace

void Nsga2Config::validate() const {
  if (population_size < 2) kFields.fail("population_size", "must be >= 2 (parents for a tournament)");
  if (generations < 0) kFields.fail("generations", "must be >= 0");
  if (objectives < 2 || objectives > 3) kFields.fail("objectives", "must be 2 or 3");
  mutation.validate();
  crossover.validate();
  if (mutation.kind == MutationKind::lpes) kFields.fail("mutation.kind", "lpes mutation is not offered (use polynomial, gaussian or uniform)");
}

void to_json(nlohmann::json& out, const Nsga2Config& config) {
  out = {{"population_size", config.population_size},
         {"generations", config.generations},
         {"objectives", config.objectives},
         {"mutation", config.mutation},
         {"crossover", config.crossover}};
  if (config.unique_children) out["unique_children"] = true;  // absent when off, like ga
}

void from_json(const nlohmann::json& in, Nsga2Config& config) {
  if (!in.is_object()) kFields.fail("", "must be a mapping");
  for (auto it = in.begin(); it != in.end(); ++it) {
    const std::string& key = it.key();
    if (key == "kind") continue;  // the factory's key
    if (key == "population_size") config.population_size = kFields.integer(key, it.value());
    else if (key == "generations") config.generations = kFields.integer(key, it.value());
    else if (key == "objectives") config.objectives = kFields.integer(key, it.value());
    else if (key == "mutation") it.value().get_to(config.mutation);
    else if (key == "crossover") it.value().get_to(config.crossover);
    else if (key == "unique_children") {
      if (!it.value().is_boolean()) kFields.fail(key, "must be true or false");
      config.unique_children = it.value().get<bool>();
    } else
      kFields.fail(key, "is not a field (expected population_size, generations, objectives, mutation, crossover, "
                "unique_children)");
  }
  config.validate();
}

std::vector<std::vector<std::size_t>> non_dominated_fronts(const std::vector<std::vector<double>>& objectives) {
  const std::size_t n = objectives.size();
  std::vector<std::vector<std::size_t>> dominated(n);  // points each point dominates
  std::vector<int> dominators(n, 0);                   // how many points dominate each point
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      if (dominates(objectives[i], objectives[j])) {
        dominated[i].push_back(j);
        ++dominators[j];
      } else if (dominates(objectives[j], objectives[i])) {
        dominated[j].push_back(i);
        ++dominators[i];
      }
    }
  }
  std::vector<std::vector<std::size_t>> fronts;
  std::vector<std::size_t> current;
  for (std::size_t i = 0; i < n; ++i)
    if (dominators[i] == 0) current.push_back(i);
  while (!current.empty()) {
    std::vector<std::size_t> next;
    for (std::size_t i : current)
      for (std::size_t j : dominated[i])
        if (--dominators[j] == 0) next.push_back(j);
    std::sort(next.begin(), next.end());
    fronts.push_back(std::move(current));
    current = std::move(next);
  }
  return fronts;
}

std::vector<double> crowding_distance(const std::vector<std::vector<double>>& objectives,
                                      const std::vector<std::size_t>& front) {
  const std::size_t size = front.size();
  std::vector<double> distance(size, 0.0);
  if (size == 0) return distance;
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  const std::size_t count = objectives[front[0]].size();
  std::vector<std::size_t> order(size);
  for (std::size_t k = 0; k < count; ++k) {
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return objectives[front[a]][k] < objectives[front[b]][k]; });
    const double low = objectives[front[order.front()]][k];
    const double high = objectives[front[order.back()]][k];
    distance[order.front()] = distance[order.back()] = kInfinity;
    if (!(high > low) || !std::isfinite(high - low)) continue;  // no spread (or unbounded): only the ends count
    for (std::size_t i = 1; i + 1 < size; ++i) {
      distance[order[i]] += (objectives[front[order[i + 1]]][k] - objectives[front[order[i - 1]]][k]) / (high - low);
    }
  }
  return distance;
}

Nsga2Strategy::Nsga2Strategy(GenomeSpace space, Nsga2Config config, std::uint64_t seed)
    : space_(std::move(space)), config_(std::move(config)), rng_(seed) {
  config_.validate();
}

const Nsga2Strategy::Member& Nsga2Strategy::tournament() {
  const Member& a = population_[rng_.index(population_.size())];
  const Member& b = population_[rng_.index(population_.size())];
  if (a.rank != b.rank) return a.rank < b.rank ? a : b;
  if (a.crowding != b.crowding) return a.crowding > b.crowding ? a : b;
  return a.candidate.id <= b.candidate.id ? a : b;
}

std::vector<Nsga2Strategy::Member> Nsga2Strategy::select(std::vector<Member> members, std::size_t keep) {
  std::vector<std::vector<double>> values;
  for (const Member& m : members) values.push_back(m.objectives);
  std::vector<Member> next;
  const auto fronts = non_dominated_fronts(values);
  for (std::size_t rank = 0; rank < fronts.size() && next.size() < keep; ++rank) {
    const std::vector<std::size_t>& front = fronts[rank];
    const std::vector<double> distance = crowding_distance(values, front);
    std::vector<std::size_t> order(front.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    // The least crowded first; ties keep the older individual.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (distance[a] != distance[b]) return distance[a] > distance[b];
      return members[front[a]].candidate.id < members[front[b]].candidate.id;
    });
    for (std::size_t i = 0; i < order.size() && next.size() < keep; ++i) {
      Member m = members[front[order[i]]];
      m.rank = static_cast<int>(rank);
      m.crowding = distance[order[i]];
      next.push_back(std::move(m));
    }
  }
  return next;
}

std::vector<Candidate> Nsga2Strategy::ask() {
  if (done()) return {};
  if (!has_pending_) {
    pending_.clear();
    const auto size = static_cast<std::size_t>(config_.population_size);
    const auto genomes_of = [](const Candidate& c) { return std::vector<Genome>{c.genome}; };
    if (generation_ == 0) {
      if (space_.seed()) {
        pending_.push_back(draw_unique<Candidate>(
            config_.unique_children, [&] { return Candidate{*space_.seed(), Origin::init, {}}; }, genomes_of));
      }
      while (pending_.size() < size) {
        pending_.push_back(draw_unique<Candidate>(
            config_.unique_children, [&] { return Candidate{space_.random_genome(rng_), Origin::init, {}}; },
            genomes_of));
      }
    } else {
      const auto draw_offspring = [&] {
        const Candidate a = tournament().candidate;
        const Candidate b = tournament().candidate;
        const std::vector<Genome> children = crossover(space_, a.genome, b.genome, config_.crossover, rng_);
        const bool crossed = !children.empty();
        const Genome child = mutate(space_, crossed ? children.front() : a.genome, config_.mutation, rng_);
        return crossed ? Candidate{child, Origin::crossover, {a.id, b.id}} : Candidate{child, Origin::mutation, {a.id}};
      };
      while (pending_.size() < size) {
        pending_.push_back(draw_unique<Candidate>(config_.unique_children, draw_offspring, genomes_of));
      }
    }
    // Ids in proposal order, after the redraws (a redrawn proposal takes none).
    for (Candidate& c : pending_) c.id = next_id_++;
    has_pending_ = true;
  }
  return pending_;
}

void Nsga2Strategy::tell(const std::vector<double>&) {
  throw std::logic_error("nsga2: needs " + std::to_string(config_.objectives) +
                         " objectives per candidate (tell_objectives), not one fitness");
}

void Nsga2Strategy::tell_objectives(const std::vector<std::vector<double>>& values) {
  if (!has_pending_) throw std::logic_error("nsga2: tell() without a pending ask()");
  if (values.size() != pending_.size())
    throw std::invalid_argument("nsga2: tell() got " + std::to_string(values.size()) + " results for " +
                                std::to_string(pending_.size()) + " candidates");
  std::vector<Member> members = population_;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].size() != static_cast<std::size_t>(config_.objectives))
      throw std::invalid_argument("nsga2: candidate " + std::to_string(pending_[i].id) + " has " +
                                  std::to_string(values[i].size()) + " objectives, expected " +
                                  std::to_string(config_.objectives));
    for (double v : values[i])
      if (std::isnan(v))
        throw std::invalid_argument("nsga2: an objective of candidate " + std::to_string(pending_[i].id) +
                                    " is NaN (report a failed evaluation as -infinity)");
    members.push_back({pending_[i], values[i], 0, 0.0});
  }
  population_ = select(std::move(members), static_cast<std::size_t>(config_.population_size));
  pending_.clear();
  has_pending_ = false;
  ++generation_;
}

bool Nsga2Strategy::done() const { return generation_ > config_.generations; }

std::vector<std::int64_t> Nsga2Strategy::population() const {
  std::vector<std::int64_t> ids;
  for (const Member& m : population_) ids.push_back(m.candidate.id);
  return ids;
}

std::vector<std::int64_t> Nsga2Strategy::front() const {
  std::vector<std::int64_t> ids;
  for (const Member& m : population_)
    if (m.rank == 0) ids.push_back(m.candidate.id);
  return ids;
}

nlohmann::json Nsga2Strategy::save_state() const {
  nlohmann::json population = nlohmann::json::array();
  for (const Member& m : population_) {
    nlohmann::json item = candidate_to_json(m.candidate);
    item["objectives"] = objectives_to_json(m.objectives);
    item["rank"] = m.rank;
    item["crowding"] = fitness_to_json(m.crowding);
    population.push_back(std::move(item));
  }
  nlohmann::json pending = nlohmann::json::array();
  for (const Candidate& c : pending_) pending.push_back(candidate_to_json(c));
  return {{"strategy", "nsga2"},
          {"version", 1},
          {"config", config_},
          {"genome_size", space_.size()},
          {"rng", rng_.save()},
          {"generation", generation_},
          {"next_id", next_id_},
          {"population", population},
          {"pending", pending},
          {"has_pending", has_pending_}};
}

void Nsga2Strategy::load_state(const nlohmann::json& state) {
  StateReader reader("nsga2", state, nlohmann::json(config_), space_);
  Rng rng;
  rng.load(reader.field("rng"));
  std::vector<Member> population;
  for (const nlohmann::json& item : reader.array("population")) {
    Member m{reader.candidate(item), {}, static_cast<int>(reader.integer(item, "rank")), 0.0};
    if (!item.contains("objectives") || !item["objectives"].is_array() ||
        item["objectives"].size() != static_cast<std::size_t>(config_.objectives))
      throw std::invalid_argument("nsga2 state: a population member lacks its " +
                                  std::to_string(config_.objectives) + " objectives");
    for (const nlohmann::json& v : item["objectives"]) m.objectives.push_back(reader.fitness({{"fitness", v}}));
    m.crowding = reader.fitness({{"fitness", item.value("crowding", nlohmann::json(0.0))}});
    population.push_back(std::move(m));
  }
  std::vector<Candidate> pending;
  for (const nlohmann::json& item : reader.array("pending")) pending.push_back(reader.candidate(item));
  // Commit only after everything parsed, so a bad state changes nothing.
  rng_ = rng;
  generation_ = static_cast<int>(reader.integer(state, "generation"));
  next_id_ = reader.integer(state, "next_id");
  population_ = std::move(population);
  pending_ = std::move(pending);
  has_pending_ = reader.boolean("has_pending");
}

}  // namespace midtune
