// JSON pieces shared by the strategies' save_state()/load_state(): the
// candidate form, fitness (±infinity as strings, which JSON lacks) and a
// reader that checks a saved state belongs to this strategy and space and
// names what is wrong otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/ga/genome.hpp"
#include "core/ga/strategy.hpp"

namespace midtune {

// {"id": 7, "genome": [..], "origin": "mutation", "parents": [3]}
nlohmann::json candidate_to_json(const Candidate& candidate);
// Finite values as numbers; ±infinity as "inf" / "-inf".
nlohmann::json fitness_to_json(double fitness);

// A strategy's config errors name "<strategy>.<field>" (e.g. "ga.parents:
// must be in 1..population_size"), as std::invalid_argument.
class ConfigFields {
 public:
  explicit ConfigFields(std::string strategy) : strategy_(std::move(strategy)) {}
  [[noreturn]] void fail(const std::string& field, const std::string& reason) const;
  // The value as an int, or "must be an integer".
  int integer(const std::string& field, const nlohmann::json& value) const;

 private:
  std::string strategy_;
};

class StateReader {
 public:
  // Checks "strategy" == kind, "version" == 1, "config" == expected_config
  // and "genome_size" == space.size(); throws std::invalid_argument.
  StateReader(std::string kind, const nlohmann::json& state, const nlohmann::json& expected_config,
              const GenomeSpace& space);
  const nlohmann::json& field(const char* key) const;
  const nlohmann::json& array(const char* key) const;
  bool boolean(const char* key) const;
  std::int64_t integer(const nlohmann::json& object, const char* key) const;
  // The genome must be valid in the space.
  Candidate candidate(const nlohmann::json& item) const;
  double fitness(const nlohmann::json& item) const;

 private:
  [[noreturn]] void fail(const std::string& reason) const;
  std::string kind_;
  const nlohmann::json& state_;
  const GenomeSpace& space_;
};

}  // namespace midtune
