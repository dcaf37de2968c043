// Progress for `ga-run EXPERIMENT.yaml`: a redrawn bar with rate and ETA when
// stderr is a terminal, one plain log line per generation otherwise, nothing
// with --quiet.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

#include "core/search/progress.hpp"

namespace midtune::cli {

class Progress : public SearchProgress {
 public:
  enum class Style { bar, log, quiet };
  // Chooses bar when the stream is stderr and isatty(2), log otherwise.
  static Style detect(bool quiet);
  Progress(std::ostream& out, Style style, int total_candidates = 1);
  void set_total(int total_candidates) override;
  void candidate_done(int done, bool cache_hit, double best_fitness) override;
  void generation_done(int generation, int generations, double best, double mean, int evaluated,
                       int cached) override;
  void message(const std::string& line) override;
  void warning(const std::string& line) override;  // printed under --quiet too
  void finish() override;

 private:
  std::ostream& out_;
  Style style_;
  int total_;
  int evaluated_ = 0;  // run by the backend in this process (for the rate)
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool bar_drawn_ = false;
};

}  // namespace midtune::cli
