// What a backend reads from a logit row: the greedy token (the first index of
// the largest value, as std::max_element) and the log-probability of a gold
// token, log softmax(row)[index], computed stably in double. The CPU engine,
// the host reference device and the CUDA scoring kernel (scoring_cuda.cu)
// agree on these definitions.
#pragma once

#include <algorithm>
#include <cmath>

namespace midtune::engine {

inline int argmax_row(const float* row, int n) { return static_cast<int>(std::max_element(row, row + n) - row); }

inline double log_softmax_at(const float* row, int n, int index) {
  const float best = *std::max_element(row, row + n);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - best);
  return static_cast<double>(row[index]) - best - std::log(sum);
}

}  // namespace midtune::engine
