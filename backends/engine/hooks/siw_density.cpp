#include "backends/engine/hooks/siw_density.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace midtune::engine::hooks {

int top_share_count(int n) { return (3 * n + 9) / 10; }

DenseChunks find_dense_chunks(std::span<const float> row, std::span<const TokenSpan> chunks, double sigma) {
  const int n = static_cast<int>(row.size());
  check_token_spans(chunks, n, "siw");
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const int top = top_share_count(n);
  std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int a, int b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  std::vector<bool> marked(static_cast<std::size_t>(n), false);
  for (int i = 0; i < top; ++i) marked[order[i]] = true;
  DenseChunks out;
  out.counts.resize(chunks.size());
  out.dense.resize(chunks.size());
  int total = 0;
  for (std::size_t m = 0; m < chunks.size(); ++m) {
    out.counts[m] = static_cast<int>(std::count(marked.begin() + chunks[m].begin, marked.begin() + chunks[m].end, true));
    total += out.counts[m];
  }
  if (chunks.empty()) return out;
  const double mean = static_cast<double>(total) / static_cast<double>(chunks.size());
  for (std::size_t m = 0; m < chunks.size(); ++m) out.dense[m] = out.counts[m] > sigma * mean;
  return out;
}

std::vector<float> head_mean_row(std::span<const float> rows, int heads, int keys) {
  if (heads <= 0 || rows.size() != static_cast<std::size_t>(heads) * keys) {
    throw std::invalid_argument("siw: expected " + std::to_string(heads) + " x " + std::to_string(keys) +
                                " attention values, got " + std::to_string(rows.size()));
  }
  std::vector<double> sum(static_cast<std::size_t>(keys), 0.0);
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < keys; ++j) sum[j] += rows[static_cast<std::size_t>(h) * keys + j];
  }
  std::vector<float> mean(static_cast<std::size_t>(keys));
  for (int j = 0; j < keys; ++j) mean[j] = static_cast<float>(sum[j] / heads);
  return mean;
}

std::vector<float> query_factors(const Siw& siw, int tokens, std::span<const TokenSpan> chunks,
                                 const DenseChunks& dense) {
  if (dense.dense.size() != chunks.size()) throw std::invalid_argument("siw: dense flags do not match the chunks");
  std::vector<float> alpha(static_cast<std::size_t>(tokens), static_cast<float>(siw.alpha_sparse));
  for (std::size_t m = 0; m < chunks.size(); ++m) {
    if (!dense.dense[m]) continue;
    for (int t = chunks[m].begin; t < std::min(chunks[m].end, tokens); ++t) alpha[t] = static_cast<float>(siw.alpha_dense);
  }
  if (tokens > 0) alpha[0] = 1.0f;
  return alpha;
}

}  // namespace midtune::engine::hooks
