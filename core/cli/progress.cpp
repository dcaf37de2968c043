#include "core/cli/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/report/table.hpp"

namespace midtune::cli {

Progress::Style Progress::detect(bool quiet) {
  if (quiet) return Style::quiet;
  return isatty(STDERR_FILENO) ? Style::bar : Style::log;
}

Progress::Progress(std::ostream& out, Style style, int total_evaluations)
    : out_(out), style_(style), total_(std::max(total_evaluations, 1)) {}

void Progress::set_total(int total_candidates) { total_ = std::max(total_candidates, 1); }

namespace {
std::string clock_text(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  return buf;
}
}  // namespace

void Progress::candidate_done(int done, bool cache_hit, double best_fitness) {
  if (!cache_hit) ++evaluated_;
  if (style_ != Style::bar) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? evaluated_ / elapsed : 0.0;
  const int remaining = std::max(total_ - done, 0);
  const int width = 30;
  const int filled = std::min(width, done * width / total_);
  out_ << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << done << "/" << total_
       << "  " << report::format_number(rate, 2) << " eval/s  ETA " << (rate > 0 ? clock_text(remaining / rate) : "--")
       << "  best " << report::format_number(best_fitness) << "   " << std::flush;
  bar_drawn_ = true;
}

void Progress::generation_done(int generation, int generations, double best, double mean, int evaluated, int cached) {
  if (style_ == Style::quiet) return;
  if (style_ == Style::bar) {
    if (bar_drawn_) out_ << '\n';
    bar_drawn_ = false;
  }
  out_ << "generation " << generation + 1 << "/" << generations << ": best " << report::format_number(best) << " mean "
       << report::format_number(mean) << " (" << evaluated << " evaluated, " << cached << " from cache)" << std::endl;
}

void Progress::message(const std::string& line) {
  if (style_ == Style::quiet) return;
  if (bar_drawn_) out_ << '\n';
  bar_drawn_ = false;
  out_ << line << std::endl;
}

void Progress::warning(const std::string& line) {
  if (bar_drawn_) out_ << '\n';
  bar_drawn_ = false;
  out_ << "warning: " << line << std::endl;
}

void Progress::finish() {
  if (bar_drawn_) out_ << '\n';
  bar_drawn_ = false;
}

}  // namespace midtune::cli
