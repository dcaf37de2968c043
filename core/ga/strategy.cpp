#include "core/ga/strategy.hpp"

#include <stdexcept>
#include <string>

namespace midtune {

const char* to_string(Origin origin) {
  switch (origin) {
    case Origin::init: return "init";
    case Origin::crossover: return "crossover";
    case Origin::mutation: return "mutation";
    case Origin::elite: return "elite";
    case Origin::grid: return "grid";
    case Origin::random: return "random";
  }
  return "?";
}

Origin origin_from_string(const std::string& name) {
  for (Origin origin : {Origin::init, Origin::crossover, Origin::mutation, Origin::elite,
                        Origin::grid, Origin::random}) {
    if (name == to_string(origin)) return origin;
  }
  throw std::invalid_argument("origin: unknown name '" + name +
                              "' (expected init, crossover, mutation, elite, grid or random)");
}

Candidate next_candidate(std::int64_t& next_id, Genome genome, Origin origin, std::vector<std::int64_t> parents) {
  Candidate candidate;
  candidate.genome = std::move(genome);
  candidate.origin = origin;
  candidate.parents = std::move(parents);
  candidate.id = next_id++;
  return candidate;
}

bool Strategy::all_new(const std::vector<Genome>& genomes) const {
  for (std::size_t i = 0; i < genomes.size(); ++i) {
    if (memory_->known(genomes[i])) return false;
    for (std::size_t j = 0; j < i; ++j)
      if (genomes[j] == genomes[i]) return false;
  }
  return true;
}

void Strategy::tell_objectives(const std::vector<std::vector<double>>& values) {
  std::vector<double> fitness;
  fitness.reserve(values.size());
  for (const auto& v : values) {
    if (v.size() != 1)
      throw std::invalid_argument("tell_objectives: this strategy takes one objective per candidate, got " +
                                  std::to_string(v.size()));
    fitness.push_back(v[0]);
  }
  tell(fitness);
}

}  // namespace midtune
