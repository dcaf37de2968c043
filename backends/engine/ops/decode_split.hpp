// How the CUDA decode step (attention_cuda.cu) splits a query's keys over
// several thread blocks when the step has too few (query, head) blocks to
// fill the GPU — a decode batch of one has a block per head — and merges
// the parts (flash-decoding: Dao, Haziza, Massa and Sizov 2023). Plain
// functions that host and device both run, so that
// tests/engine/decode_split_test.cpp checks the kernels' arithmetic on
// machines without a GPU; device_bodies_test checks the kernels on one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::decode_split {

// A step splits while its blocks number fewer than kBlocksPerSm a
// multiprocessor, into at most kMaxSplits parts of at least kMinSplitKeys
// keys each (a part's fixed cost, its partial row and its merge, stays
// small beside its keys). A block of the kernel is 8 warps, each walking
// its keys one dependent load after another, so a multiprocessor wants
// several blocks in flight, not one.
constexpr int kBlocksPerSm = 4;
constexpr int kMaxSplits = 32;
constexpr int kMinSplitKeys = 64;

// The parts each query's keys take in a step of `blocks` (query, head)
// blocks whose longest query sees `longest_keys` keys: 1 = no split.
inline int split_count(int blocks, int longest_keys, int multiprocessors) {
  if (blocks <= 0 || multiprocessors <= 0 || longest_keys <= 0) return 1;
  const int wanted = (kBlocksPerSm * multiprocessors + blocks - 1) / blocks;
  const int by_keys = (longest_keys + kMinSplitKeys - 1) / kMinSplitKeys;
  return std::max(1, std::min({wanted, by_keys, kMaxSplits}));
}

// The workspace of such a step: every part's normalised output row
// (head_dim floats) and its log-sum-exp.
inline std::size_t workspace_floats(int blocks, int splits, int head_dim) {
  return static_cast<std::size_t>(blocks) * splits * (head_dim + 1);
}
// The most any step takes on a GPU of `multiprocessors` (split_count gives
// more than one part only below kBlocksPerSm x multiprocessors blocks).
inline std::size_t largest_workspace_floats(int multiprocessors, int max_head_dim) {
  return workspace_floats(kBlocksPerSm * std::max(multiprocessors, 1), kMaxSplits, max_head_dim);
}

// Part `split` of `splits` of the keys [visible, limit) a query sees: equal
// spans of ceil((limit - visible) / splits) keys in order, so the parts are
// disjoint and cover the keys; where there are fewer keys than parts the
// last ones are empty (first == end), never the first.
struct KeyRange {
  int first, end;
};
MIDTUNE_HOST_DEVICE inline KeyRange key_split(int visible, int limit, int split, int splits) {
  const int span = (limit - visible + splits - 1) / splits;
  const int start = visible + split * span;  // std::min is host-only
  const int first = start < limit ? start : limit;
  return {first, first + span < limit ? first + span : limit};
}

// One output element of a query merged from its parts: each part's
// normalised output weighed by its share of the softmax denominator,
// exp(lse_s - largest) / sum over parts, where lse_s is the part's log-sum-
// exp of its scores (-infinity for an empty part: weight 0). The same merge
// as merge_attention.hpp's for two parts. Part s's log-sum-exp at
// lse[s * lse_stride], its output at part_out[s * out_stride].
MIDTUNE_HOST_DEVICE inline float merge_splits(const float* lse, std::size_t lse_stride, const float* part_out,
                                              std::size_t out_stride, int splits) {
  float largest = -INFINITY;
  for (int s = 0; s < splits; ++s) largest = lse[s * lse_stride] > largest ? lse[s * lse_stride] : largest;
  float sum = 0.0f, weights = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float w = ::expf(lse[s * lse_stride] - largest);
    weights += w;
    sum += w * part_out[s * out_stride];
  }
  return sum / weights;
}

}  // namespace midtune::engine::decode_split
