// What the search tells whoever watches it (core/cli draws a bar or log
// lines from it); the search layer itself prints nothing.
#pragma once

#include <string>

namespace midtune {

class SearchProgress {
 public:
  virtual ~SearchProgress() = default;
  // Candidates this process expects to handle (for a bar and an ETA).
  virtual void set_total(int total_candidates) = 0;
  // After each candidate: how many are done (of total), whether from cache.
  virtual void candidate_done(int done, bool cache_hit, double best_fitness) = 0;
  // After each generation's checkpoint.
  virtual void generation_done(int generation, int generations, double best, double mean, int evaluated,
                               int cached) = 0;
  virtual void message(const std::string& line) = 0;
  // What the user must see even when progress is off.
  virtual void warning(const std::string& line) { message("warning: " + line); }
  virtual void finish() = 0;
};

}  // namespace midtune
