// How the host bodies split row-wise work across oneTBB's threads: only
// prefill-sized calls go parallel; a decode step is too small to pay for
// the task overhead (not even an inline TBB loop's).
#pragma once

#include <algorithm>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace midtune::engine::row_parallel {

constexpr int kParallelRows = 16;

// f(range) over [0, rows): in grain-sized ranges in parallel from
// kParallelRows rows on (and where `parallel`), else one range here.
template <class F>
void for_row_ranges(int rows, int grain, const F& f, bool parallel = true) {
  if (!parallel || rows < kParallelRows) {
    f(tbb::blocked_range<int>(0, rows, std::max(rows, 1)));
  } else {
    tbb::parallel_for(tbb::blocked_range<int>(0, rows, grain), f);
  }
}

// f(i) for i in [0, count): in parallel for a prefill's `tokens`, on the
// calling thread for a decode step's few (per-head and per-slot loops there
// are a few microseconds of work, less than the fork and join; 18 layers of
// them were ~1 % of a Gemma 3 decode step).
template <class F>
void for_each_index(int count, int tokens, const F& f, bool parallel = true) {
  if (!parallel || tokens < kParallelRows) {
    for (int i = 0; i < count; ++i) f(i);
  } else {
    tbb::parallel_for(0, count, f);
  }
}

}  // namespace midtune::engine::row_parallel
