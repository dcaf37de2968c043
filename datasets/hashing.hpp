// Deterministic hashing and random draws, written out so that every platform
// and standard library produces the same datasets and splits from a seed
// (std::uniform_int_distribution and friends are implementation-defined).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace midtune::datasets {

// FNV-1a, 64-bit: content and identity hashes.
std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t basis = 0xcbf29ce484222325ULL);
std::string hex64(std::uint64_t value);  // 16 lower-case hex digits

// SplitMix64 (Steele, Lea, Flood 2014): tiny, full-period, well mixed.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  // Uniform in [0, bound) by rejection (no modulo bias); bound > 0.
  std::uint64_t below(std::uint64_t bound);

 private:
  std::uint64_t state_;
};

// A stream seed derived from (seed, label, index): independent streams for
// e.g. ("kv-search", 17) and ("kv-heldout", 17).
std::uint64_t derive_seed(std::uint64_t seed, std::string_view label, std::uint64_t index);

// A random version-4 UUID string (8-4-4-4-12 lower-case hex, RFC 4122 bits).
std::string uuid4(SplitMix64& rng);

}  // namespace midtune::datasets
