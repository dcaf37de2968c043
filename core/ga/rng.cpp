#include "core/ga/rng.hpp"

#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>
#include <stdexcept>

namespace midtune {

Rng::Rng(std::uint64_t seed) : engine_(seed) {}

std::uint64_t Rng::next_u64() { return engine_(); }

double Rng::uniform01() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

std::int64_t Rng::uniform_int(std::int64_t lo, std::int64_t hi) {
  if (lo > hi) {
    throw std::invalid_argument("Rng::uniform_int: lo " + std::to_string(lo) + " > hi " +
                                std::to_string(hi));
  }
  const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
  if (span == std::numeric_limits<std::uint64_t>::max()) return static_cast<std::int64_t>(next_u64());
  const std::uint64_t range = span + 1;
  // Reject the top partial block of 2^64 so every residue is equally likely.
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                              std::numeric_limits<std::uint64_t>::max() % range;
  std::uint64_t draw = next_u64();
  while (draw >= limit) draw = next_u64();
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + draw % range);
}

std::size_t Rng::index(std::size_t n) {
  if (n == 0) throw std::invalid_argument("Rng::index: empty range");
  return static_cast<std::size_t>(uniform_int(0, static_cast<std::int64_t>(n) - 1));
}

bool Rng::bernoulli(double p) { return uniform01() < p; }

double Rng::normal() {
  const double u1 = 1.0 - uniform01();  // (0, 1]: log is finite
  const double u2 = uniform01();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

nlohmann::json Rng::save() const {
  std::ostringstream out;
  out << engine_;
  return {{"engine", "mt19937_64"}, {"state", out.str()}};
}

void Rng::load(const nlohmann::json& state) {
  if (!state.is_object() || state.value("engine", "") != "mt19937_64" ||
      !state.contains("state") || !state["state"].is_string()) {
    throw std::invalid_argument("rng state: expected {\"engine\": \"mt19937_64\", \"state\": \"...\"}");
  }
  std::istringstream in(state["state"].get<std::string>());
  std::mt19937_64 engine;
  in >> engine;
  if (in.fail()) throw std::invalid_argument("rng state: the engine state text is malformed");
  engine_ = engine;
}

}  // namespace midtune
