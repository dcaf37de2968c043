// CALIOPE position calibration (CALIOPE eq. 2-5, docs/methods.md "CALIOPE"):
//   Phi(t) = t + c(m(t)),
// m(t) = index (1..d) of the chunk token t is in or follows, 0 before the
// first chunk; tokens after the last chunk (question, answer, generated
// tokens) use c(d). Calibrators:
//   moses      c(m) = 0 if m <= floor(d/2) else gap                      (eq. 3)
//   hourglass  c(m) = sum_{k=1}^{m-1} [dmin + 4 k/(d-1) (1 - k/(d-1)) (dmax - dmin)]  (eq. 4)
//   decay      c(m) = sum_{k=1}^{m-1} delta0 lambda^k                     (eq. 5)
// Phi must be strictly increasing (the paper's constraint); parameters that
// could break it are rejected by validate_position_map (methods/caliope.hpp).
#pragma once

#include <span>
#include <vector>

#include "backends/engine/hooks/token_span.hpp"
#include "methods/intervention.hpp"

namespace midtune::engine::hooks {

// c(m) for m = 0..chunks (chunks + 1 values).
std::vector<double> calibrator_offsets(const PositionMap& map, int chunks);

// Phi(t) for t = 0..tokens-1. Checks the spans and strict increase; throws
// std::invalid_argument naming the first offending token otherwise.
std::vector<double> calibrated_positions(const PositionMap& map, int tokens,
                                         std::span<const TokenSpan> chunks);

}  // namespace midtune::engine::hooks
