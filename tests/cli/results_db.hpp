// What the ga-run integration tests share: a small search on the synthetic
// test double, and reading rows back from a results database.
#pragma once

#include <string>
#include <vector>

#include "schema/sqlite.hpp"

namespace midtune::testing {

// A small LPES search on the test double; latency_ms makes each evaluation
// take a little wall time so kills and second processes land mid-run.
inline std::string synthetic_lpes_experiment(const std::string& name, int generations, double latency_ms) {
  return "name: " + name +
         "\n"
         "seed: 77\n"
         "backend: {kind: synthetic-test-double, layers: 12, heads: 2, noise: 0.05, latency_ms: " +
         std::to_string(latency_ms) +
         "}\n"
         "dataset: {kind: kv, pairs: 6, gold_positions: [0.0, 0.5, 1.0], search_samples: 8, heldout_samples: 8, "
         "metric: teacher_forced}\n"
         "objective:\n  kind: lpes\n  lpes: {curve: bezier, degree: 3}\n"
         "search:\n  strategy: ga\n  ga: {population: 10, parents: 4, generations: " +
         std::to_string(generations) + ", mutants: 4, crossovers: 2}\n";
}

// The rows of one query (text parameter ?1 when given), one string per
// row, columns joined by " | ".
inline std::vector<std::string> query_rows(const std::string& db, const std::string& sql_text,
                                           const std::string& parameter = "") {
  sql::Database d(db, sql::Database::Mode::read_only);
  auto s = d.prepare(sql_text);
  if (!parameter.empty()) s.bind(1, parameter);
  std::vector<std::string> out;
  while (s.step()) {
    std::string row;
    for (int c = 0; c < s.column_count(); ++c) row += (c ? " | " : "") + s.column_text(c);
    out.push_back(row);
  }
  return out;
}

}  // namespace midtune::testing
