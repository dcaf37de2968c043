// The search's only source of randomness. std::mt19937_64 is fully specified
// by the standard, so its stream is identical everywhere; the standard
// distributions are not (their algorithms are implementation-defined), so the
// draws below are written out. normal() uses std::log/std::cos, which may
// differ in the last ulp between libms; every gene value is snapped to its
// grid afterwards, so this never shows in practice.
#pragma once

#include <cstdint>
#include <random>

#include <nlohmann/json.hpp>

namespace midtune {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0);

  std::uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform01();
  // Uniform integer in [lo, hi] (inclusive), unbiased (rejection sampling).
  // Throws std::invalid_argument if lo > hi.
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi);
  // Uniform index in [0, n); n > 0.
  std::size_t index(std::size_t n);
  bool bernoulli(double p);
  // Standard normal by Box-Muller; no cached second value, so the state is
  // exactly the engine state.
  double normal();

  // {"engine": "mt19937_64", "state": "<the engine's text form>"}
  nlohmann::json save() const;
  // Throws std::invalid_argument on a malformed state.
  void load(const nlohmann::json& state);

  bool operator==(const Rng& other) const { return engine_ == other.engine_; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace midtune
