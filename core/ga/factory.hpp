// Builds a Strategy from its configuration:
//   {"kind": "ga", ...GaStrategyConfig fields...}
//   {"kind": "grid", "values": {"gene": [..]}, "batch_size": 32}
//   {"kind": "random", "count": 64, "batch_size": 32}
//   {"kind": "nsga2", ...Nsga2Config fields...}
#pragma once

#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/ga/genome.hpp"
#include "core/ga/strategy.hpp"

namespace midtune {

// Throws std::invalid_argument naming the field and reason ("strategy.kind:
// unknown kind 'gaa' (expected ga, grid or random)").
std::unique_ptr<Strategy> make_strategy(const GenomeSpace& space, const nlohmann::json& config,
                                        std::uint64_t seed);

}  // namespace midtune
