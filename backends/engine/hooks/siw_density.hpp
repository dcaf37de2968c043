// SIW dense areas and per-token factors (SIW sec. 3.2, docs/methods.md "SIW").
// Per layer: the last query's attention row (mean over the layer's heads)
// marks its top ceil(30 % of n) tokens (ties: lower index first); chunk m
// counts its marked tokens; chunk m is dense when count_m > sigma * (sum of
// counts / M). Query token i >= 1 then has its post-softmax weight on key 0
// multiplied by alpha_dense inside a dense chunk and alpha_sparse elsewhere
// (question, template, generated tokens too), no renormalisation. Query 0
// (the initial token itself) keeps factor 1: the paper scales i in (0, n].
// Without chunks every query i >= 1 uses alpha_sparse (uniform SIW).
#pragma once

#include <span>
#include <vector>

#include "backends/engine/hooks/token_span.hpp"
#include "methods/intervention.hpp"

namespace midtune::engine::hooks {

struct DenseChunks {
  std::vector<int> counts;   // marked tokens per chunk
  std::vector<bool> dense;   // per chunk
};

// Number of tokens marked in a row of n: ceil(3n / 10), in integers.
int top_share_count(int n);

// `row`: the head-mean softmax row of the last query over all n keys.
DenseChunks find_dense_chunks(std::span<const float> row, std::span<const TokenSpan> chunks, double sigma);

// Mean of `heads` rows of `keys` values (row-major).
std::vector<float> head_mean_row(std::span<const float> rows, int heads, int keys);

// Factor on key 0 for each query token 0..tokens-1 (factor 1 for token 0).
std::vector<float> query_factors(const Siw& siw, int tokens, std::span<const TokenSpan> chunks,
                                 const DenseChunks& dense);

}  // namespace midtune::engine::hooks
