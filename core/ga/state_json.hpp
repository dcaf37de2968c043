// JSON pieces shared by the strategies' save_state()/load_state(): the
// candidate form, fitness (±infinity as strings, which JSON lacks) and a
// reader that checks a saved state belongs to this strategy and space and
// names what is wrong otherwise.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/ga/genome.hpp"
#include "core/ga/strategy.hpp"

namespace midtune {

// {"id": 7, "genome": [..], "origin": "mutation", "parents": [3]}
nlohmann::json candidate_to_json(const Candidate& candidate);
// Finite values as numbers; ±infinity as "inf" / "-inf".
nlohmann::json fitness_to_json(double fitness);

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
