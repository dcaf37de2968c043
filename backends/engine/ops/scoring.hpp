// What a backend reads from a logit row: the greedy token (the first index of
// the largest value, as std::max_element) and the log-probability of a gold
// token, log softmax(row)[index], computed stably in double. The host bodies
// and the CUDA scoring kernel (scoring_cuda.cu) agree on these definitions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/engine/ops/op_target.hpp"

namespace midtune::engine {

inline int argmax_row(const float* row, int n) { return static_cast<int>(std::max_element(row, row + n) - row); }

inline double log_softmax_at(const float* row, int n, int index) {
  const float best = *std::max_element(row, row + n);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - best);
  return static_cast<double>(row[index]) - best - std::log(sum);
}

namespace cuda {
void score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold, std::int32_t* argmax,
                double* gold_logprob, void* stream = nullptr);
}  // namespace cuda

// The model's entry (op_target.hpp): per logit row (rows of `vocab`), the
// argmax and (gold != nullptr) the log-probability of gold[r].
namespace ops {
void score_rows(const OpTarget& at, const float* logits, int rows, int vocab, const std::int32_t* gold,
                std::int32_t* argmax, double* gold_logprob);
}  // namespace ops

}  // namespace midtune::engine
