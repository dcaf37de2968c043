// Ms-PoE head ratios (Ms-PoE sec. 3.2-3.3, docs/methods.md "Ms-PoE"). At prefill,
// per layer >= first_layer, each query head's softmax row of the last query
// (from Q.K before RoPE, as the public code does) gives
//   S_p(h) = #{j : A_j > alpha * mean(A)} / n,  mean(A) = 1/n     (eq. 1)
// and the heads are ranked to the ratios
//   r_i = min + i (max - min) / (H - 1), i = 0..H-1              (eq. 2, paper)
//   r_i = min + i (max - min) / H                                 (public code)
// Orders:
//   awareness          head of rank i by descending S_p gets r_i (ties: lower head first)
//   reference-argsort  head k gets r[argsort(-S_p)[k]] (the public code's indexing)
//   sequential         head k gets r_k
//   random             a seeded permutation per layer (splitmix64 Fisher-Yates)
//   entropy            rank by descending entropy -sum A log A (flatter rows get ratios near min)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "methods/intervention.hpp"

namespace midtune::engine::hooks {

// Eq. 1 on one softmax row of `row.size()` keys.
double awareness_score(std::span<const float> row, double alpha);
double row_entropy(std::span<const float> row);

// The H ratios r_0..r_{H-1} (eq. 2 or the public code's spacing).
std::vector<double> spaced_ratios(const MsPoe& mspoe, int heads);

// Index into spaced_ratios() for each head, from the heads' softmax rows
// (heads x keys, row-major) of the last query in layer `layer`.
std::vector<int> ratio_index_per_head(const MsPoe& mspoe, std::span<const float> rows, int heads,
                                      int keys, int layer);

// The RoPE ratio of each head: spaced_ratios()[ratio_index_per_head()].
std::vector<double> head_ratios(const MsPoe& mspoe, std::span<const float> rows, int heads, int keys,
                                int layer);

}  // namespace midtune::engine::hooks
