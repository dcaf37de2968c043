// `ga-run report --format html`: one self-contained page (inline CSS and
// SVG, no script, no network) that shows a search's answer as pictures:
// what ran, fitness by generation, the best intervention drawn as what it
// is, held-out accuracy by position with 95 % Wilson bands, the paired
// comparisons and their verdicts, and a Pareto front.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace midtune::report {

// `report` is build_report()'s JSON. Every section has an id (experiment,
// answer, fitness, best, heldout, comparisons, pareto) so tests and readers
// can find it; a section without data says why instead of drawing.
std::string html_report(const nlohmann::json& report);

}  // namespace midtune::report
