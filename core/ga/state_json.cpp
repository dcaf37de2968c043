#include "core/ga/state_json.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace midtune {

nlohmann::json candidate_to_json(const Candidate& candidate) {
  return {{"id", candidate.id},
          {"genome", candidate.genome},
          {"origin", to_string(candidate.origin)},
          {"parents", candidate.parents}};
}

nlohmann::json fitness_to_json(double fitness) {
  if (std::isinf(fitness)) return fitness > 0 ? "inf" : "-inf";
  return fitness;
}

StateReader::StateReader(std::string kind, const nlohmann::json& state,
                         const nlohmann::json& expected_config, const GenomeSpace& space)
    : kind_(std::move(kind)), state_(state), space_(space) {
  if (!state_.is_object()) fail("expected an object");
  if (field("strategy") != kind_) {
    fail("was saved by strategy " + field("strategy").dump() + ", not \"" + kind_ + "\"");
  }
  if (field("version") != 1) fail("version " + field("version").dump() + " is not supported (1)");
  if (field("config") != expected_config) {
    fail("was saved with config " + field("config").dump() + ", this strategy has " +
         expected_config.dump());
  }
  if (integer(state_, "genome_size") != static_cast<std::int64_t>(space_.size())) {
    fail("genome_size " + field("genome_size").dump() + " differs from the space's " +
         std::to_string(space_.size()) + " genes");
  }
}

void ConfigFields::fail(const std::string& field, const std::string& reason) const {
  throw std::invalid_argument(strategy_ + "." + field + ": " + reason);
}

int ConfigFields::integer(const std::string& field, const nlohmann::json& value) const {
  if (!value.is_number_integer()) fail(field, "must be an integer");
  return value.get<int>();
}

void StateReader::fail(const std::string& reason) const {
  throw std::invalid_argument(kind_ + " state: " + reason);
}

const nlohmann::json& StateReader::field(const char* key) const {
  if (!state_.contains(key)) fail(std::string("missing field '") + key + "'");
  return state_[key];
}

const nlohmann::json& StateReader::array(const char* key) const {
  const nlohmann::json& value = field(key);
  if (!value.is_array()) fail(std::string("'") + key + "' must be a list");
  return value;
}

bool StateReader::boolean(const char* key) const {
  const nlohmann::json& value = field(key);
  if (!value.is_boolean()) fail(std::string("'") + key + "' must be true or false");
  return value.get<bool>();
}

std::int64_t StateReader::integer(const nlohmann::json& object, const char* key) const {
  if (!object.is_object() || !object.contains(key) || !object[key].is_number_integer()) {
    fail(std::string("'") + key + "' must be an integer");
  }
  return object[key].get<std::int64_t>();
}

Candidate StateReader::candidate(const nlohmann::json& item) const {
  Candidate candidate;
  candidate.id = integer(item, "id");
  try {
    candidate.genome = item.at("genome").get<Genome>();
    candidate.origin = origin_from_string(item.at("origin").get<std::string>());
    candidate.parents = item.at("parents").get<std::vector<std::int64_t>>();
  } catch (const nlohmann::json::exception& error) {
    fail("candidate " + std::to_string(candidate.id) + ": " + error.what());
  } catch (const std::invalid_argument& error) {
    fail("candidate " + std::to_string(candidate.id) + ": " + error.what());
  }
  const std::string reason = space_.why_invalid(candidate.genome);
  if (!reason.empty()) fail("candidate " + std::to_string(candidate.id) + ": " + reason);
  return candidate;
}

double StateReader::fitness(const nlohmann::json& item) const {
  const nlohmann::json& value = item.contains("fitness") ? item["fitness"] : nlohmann::json();
  if (value.is_number()) return value.get<double>();
  if (value == "inf") return std::numeric_limits<double>::infinity();
  if (value == "-inf") return -std::numeric_limits<double>::infinity();
  fail("fitness " + value.dump() + " is not a number, \"inf\" or \"-inf\"");
}

}  // namespace midtune
