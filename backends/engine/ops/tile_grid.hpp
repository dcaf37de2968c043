// The parallel split both matmuls (packed_matmul, float_matmul) share: tokens
// in chunks of 64, so that a chunk's activations stay in L2 while the row
// groups stream past, and four row groups (64 outputs) as the smallest work
// item. body(t0, t1, g0, g1) computes tokens [t0, t1) x groups [g0, g1).
#pragma once

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

namespace midtune::engine {

template <typename Body>
void for_each_tile(int tokens, int groups, bool parallel, const Body& body) {
  constexpr int kTokenChunk = 64;
  constexpr int kGroupChunk = 4;
  if (!parallel) {
    body(0, tokens, 0, groups);
    return;
  }
  tbb::parallel_for(tbb::blocked_range2d<int>(0, tokens, kTokenChunk, 0, groups, kGroupChunk),
                    [&](const tbb::blocked_range2d<int>& r) {
                      body(r.rows().begin(), r.rows().end(), r.cols().begin(), r.cols().end());
                    });
}

}  // namespace midtune::engine
