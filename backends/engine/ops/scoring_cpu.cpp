#include "backends/engine/ops/scoring.hpp"

#include <cstddef>

namespace midtune::engine::ops {

void score_rows(const OpTarget& at, const float* logits, int rows, int vocab, const std::int32_t* gold,
                std::int32_t* argmax, double* gold_logprob) {
  if (at.on_cuda()) MIDTUNE_CUDA_BODY(cuda::score_rows(logits, rows, vocab, gold, argmax, gold_logprob, at.stream));
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<std::size_t>(r) * vocab;
    argmax[r] = argmax_row(row, vocab);
    if (gold != nullptr) gold_logprob[r] = log_softmax_at(row, vocab, gold[r]);
  }
}

}  // namespace midtune::engine::ops
