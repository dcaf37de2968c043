#include "core/ga/factory.hpp"

#include <stdexcept>

#include "core/ga/ga_strategy.hpp"
#include "core/ga/nsga2.hpp"
#include "core/ga/sweep_strategies.hpp"

namespace midtune {

std::unique_ptr<Strategy> make_strategy(const GenomeSpace& space, const nlohmann::json& config,
                                        std::uint64_t seed) {
  if (!config.is_object() || !config.contains("kind") || !config["kind"].is_string()) {
    throw std::invalid_argument("strategy.kind: missing (expected ga, grid, random or nsga2)");
  }
  const std::string kind = config["kind"].get<std::string>();
  if (kind == "ga") return std::make_unique<GaStrategy>(space, config.get<GaStrategyConfig>(), seed);
  if (kind == "grid") return std::make_unique<GridStrategy>(space, config.get<GridConfig>(), seed);
  if (kind == "random") return std::make_unique<RandomStrategy>(space, config.get<RandomConfig>(), seed);
  if (kind == "nsga2") return std::make_unique<Nsga2Strategy>(space, config.get<Nsga2Config>(), seed);
  throw std::invalid_argument("strategy.kind: unknown kind '" + kind + "' (expected ga, grid, random or nsga2)");
}

}  // namespace midtune
