#include "backends/engine/ops/last_query_rows.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace midtune::engine {

void last_query_rows_before_rope(const float* qkv, std::size_t ld, int T, int heads, int kv_heads, int head_dim,
                                 std::size_t k_offset, float* rows) {
  if (T <= 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || head_dim <= 0 ||
      k_offset < static_cast<std::size_t>(heads) * head_dim ||
      ld < k_offset + static_cast<std::size_t>(kv_heads) * head_dim) {
    throw std::invalid_argument("last query rows: " + std::to_string(T) + " tokens, heads " + std::to_string(heads) +
                                "/" + std::to_string(kv_heads) + " x " + std::to_string(head_dim) + ", stride " +
                                std::to_string(ld));
  }
  const int group = heads / kv_heads;
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> score(static_cast<std::size_t>(T));
  for (int h = 0; h < heads; ++h) {
    const float* q = qkv + static_cast<std::size_t>(T - 1) * ld + static_cast<std::size_t>(h) * head_dim;
    double top = -INFINITY;
    for (int j = 0; j < T; ++j) {
      const float* k = qkv + static_cast<std::size_t>(j) * ld + k_offset + static_cast<std::size_t>(h / group) * head_dim;
      double dot = 0.0;
      for (int i = 0; i < head_dim; ++i) dot += static_cast<double>(q[i]) * k[i];
      score[j] = dot * inv_sqrt;
      top = std::max(top, score[j]);
    }
    double sum = 0.0;
    for (int j = 0; j < T; ++j) sum += (score[j] = std::exp(score[j] - top));
    for (int j = 0; j < T; ++j) rows[static_cast<std::size_t>(h) * T + j] = static_cast<float>(score[j] / sum);
  }
}

namespace ops {

void last_query_rows(const OpTarget& at, const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads,
                     int head_dim, std::size_t k_offset, float* rows) {
  if (at.on_cuda()) {
    MIDTUNE_CUDA_BODY(cuda::last_query_rows(qkv, ld, tokens, heads, kv_heads, head_dim, k_offset, rows, at.stream));
  }
  last_query_rows_before_rope(qkv, ld, tokens, heads, kv_heads, head_dim, k_offset, rows);
}

}  // namespace ops

}  // namespace midtune::engine
