#include "backends/engine/ops/merge_attention.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine {

void merge_attention_rows(float* a, std::size_t a_ld, const float* lse_a, std::size_t lse_a_ld, const float* b,
                          std::size_t b_ld, const float* lse_b, std::size_t lse_b_ld, int rows, int heads,
                          int head_dim) {
  const std::size_t width = static_cast<std::size_t>(heads) * head_dim;
  if (rows < 0 || heads <= 0 || head_dim <= 0 || a_ld < width || b_ld < width ||
      (rows > 0 && (lse_a_ld < static_cast<std::size_t>(rows) || lse_b_ld < static_cast<std::size_t>(rows)))) {
    throw std::invalid_argument("merge attention: " + std::to_string(rows) + " rows of " + std::to_string(heads) +
                                " x " + std::to_string(head_dim) + ", strides " + std::to_string(a_ld) + "/" +
                                std::to_string(b_ld) + ", log-sum-exp strides " + std::to_string(lse_a_ld) + "/" +
                                std::to_string(lse_b_ld));
  }
  for (int t = 0; t < rows; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float w = elementwise::merge_weight(lse_a[static_cast<std::size_t>(h) * lse_a_ld + t],
                                                lse_b[static_cast<std::size_t>(h) * lse_b_ld + t]);
      float* x = a + t * a_ld + static_cast<std::size_t>(h) * head_dim;
      const float* y = b + t * b_ld + static_cast<std::size_t>(h) * head_dim;
      for (int d = 0; d < head_dim; ++d) x[d] = elementwise::merged_value(w, x[d], y[d]);
    }
  }
}

namespace ops {

void merge_attention(const OpTarget& at, float* a, std::size_t a_ld, const float* lse_a, std::size_t lse_a_ld,
                     const float* b, std::size_t b_ld, const float* lse_b, std::size_t lse_b_ld, int rows, int heads,
                     int head_dim) {
  if (at.on_cuda()) {
    MIDTUNE_CUDA_BODY(
        cuda::merge_attention(a, a_ld, lse_a, lse_a_ld, b, b_ld, lse_b, lse_b_ld, rows, heads, head_dim, at.stream));
  }
  merge_attention_rows(a, a_ld, lse_a, lse_a_ld, b, b_ld, lse_b, lse_b_ld, rows, heads, head_dim);
}

}  // namespace ops

}  // namespace midtune::engine
