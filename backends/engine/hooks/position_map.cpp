#include "backends/engine/hooks/position_map.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace midtune::engine::hooks {
namespace {

[[noreturn]] void bad(const std::string& field, const std::string& reason) {
  throw std::invalid_argument("position_map." + field + ": " + reason);
}

}  // namespace

std::vector<double> calibrator_offsets(const PositionMap& map, int chunks) {
  if (chunks < 0) throw std::invalid_argument("calibrator_offsets: negative chunk count");
  const int d = chunks;
  std::vector<double> c(static_cast<std::size_t>(d) + 1, 0.0);
  for (int m = 1; m <= d; ++m) {
    if (map.kind == "moses") {
      c[m] = m <= d / 2 ? 0.0 : map.gap;  // eq. 3
    } else {
      // c(m) = c(m-1) + term(m-1); term(0) does not exist (empty sum at m = 1).
      const int k = m - 1;
      double term = 0.0;
      if (k >= 1 && map.kind == "hourglass") {  // eq. 4 (k <= d-1 here, so d >= 2)
        const double u = static_cast<double>(k) / (d - 1);
        term = map.delta_min + 4.0 * u * (1.0 - u) * (map.delta_max - map.delta_min);
      } else if (k >= 1 && map.kind == "decay") {  // eq. 5
        term = map.delta0 * std::pow(map.lambda, k);
      } else if (map.kind != "hourglass" && map.kind != "decay") {
        bad("kind", "'" + map.kind + "' is not one of moses, hourglass, decay");
      }
      c[m] = c[m - 1] + term;
    }
  }
  return c;
}

std::vector<double> calibrated_positions(const PositionMap& map, int tokens,
                                         std::span<const TokenSpan> chunks) {
  check_token_spans(chunks, tokens, "position_map");
  const std::vector<double> c = calibrator_offsets(map, static_cast<int>(chunks.size()));
  std::vector<double> phi(static_cast<std::size_t>(tokens));
  std::size_t m = 0;  // chunks that begin at or before t
  for (int t = 0; t < tokens; ++t) {
    while (m < chunks.size() && chunks[m].begin <= t) ++m;
    phi[t] = t + c[m];
    if (t > 0 && !(phi[t] > phi[t - 1])) {
      throw std::invalid_argument("position_map (" + map.kind + "): Phi is not strictly increasing at token " +
                                  std::to_string(t) + " (Phi(" + std::to_string(t - 1) + ") = " +
                                  std::to_string(phi[t - 1]) + ", Phi(" + std::to_string(t) + ") = " +
                                  std::to_string(phi[t]) + ")");
    }
  }
  return phi;
}

}  // namespace midtune::engine::hooks
