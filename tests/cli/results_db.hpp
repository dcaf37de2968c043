// What the ga-run integration tests share: a small search on the synthetic
// test double, and reading rows back from a results database.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <utility>
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

// Rows that must be equal bit for bit between an interrupted-and-resumed
// run and an uninterrupted one: every sample (output, gold log-probability
// printed to 17 digits), evaluation, individual and generation checkpoint;
// ids and times aside.
inline const std::vector<std::pair<std::string, std::string>>& stored_rows() {
  static const std::vector<std::pair<std::string, std::string>> rows = {
      {"samples",
       "SELECT e.cache_key, s.sample_id, s.gold_position, s.correct, s.output, printf('%.17g', s.gold_logprob), "
       "s.prompt_tokens "
       "FROM sample_results s JOIN evaluations e ON e.id = s.evaluation_id ORDER BY e.cache_key, s.sample_id"},
      {"evaluations",
       "SELECT cache_key, status, complete, position_scores, fitness_inputs FROM evaluations ORDER BY cache_key"},
      {"individuals",
       "SELECT candidate_id, generation, genome, origin, parents, printf('%.17g', fitness), cache_hit, "
       "raced_samples FROM individuals ORDER BY experiment_id, candidate_id"},
      {"generations",
       "SELECT generation, population, strategy_state, printf('%.17g', best_fitness) FROM generations ORDER BY "
       "experiment_id, generation"},
  };
  return rows;
}

// The count a `SELECT count(*) ...` query of `db` gives; 0 while the file
// or its tables do not exist yet (a run still starting).
inline int count_or_zero(const std::string& db, const std::string& count_query) {
  try {
    return std::stoi(query_rows(db, count_query)[0]);
  } catch (const std::exception&) {
    return 0;
  }
}
// How many rows `table` of `db` holds (0 before it exists).
inline int stored_rows_of(const std::string& db, const std::string& table) {
  return count_or_zero(db, "SELECT count(*) FROM " + table);
}
// Generation checkpoints and individuals `db` holds.
inline int stored_generations(const std::string& db) { return stored_rows_of(db, "generations"); }
inline int stored_individuals(const std::string& db) { return stored_rows_of(db, "individuals"); }

// Waits until `db` holds at least `count` checkpoints, polling every 20 ms
// for at most `limit_s` seconds; false when it did not.
inline bool wait_for_generations(const std::string& db, int count, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  while (stored_generations(db) < count) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace midtune::testing
