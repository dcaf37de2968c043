// The last query's softmax rows before RoPE, one per query head:
//   rows[h][j] = softmax_j(q_last(h) . k_j(h / group) / sqrt(head_dim)),  j < tokens
// from the Q|K|V rows of a prefill (Q at column 0, K at `k_offset`, heads and
// kv_heads of head_dim each). Ms-PoE ranks heads by them (Ms-PoE eq. 1; the
// public code reads the attention before RoPE). Dot products, maximum and sum
// in double, rows rounded to float. Bodies: scalar here, CUDA in
// last_query_rows_cuda.cu.
#pragma once

#include <cstddef>

#include "backends/engine/ops/op_target.hpp"

namespace midtune::engine {

// rows: heads x tokens floats. Throws std::invalid_argument on bad shapes.
void last_query_rows_before_rope(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads, int head_dim,
                                 std::size_t k_offset, float* rows);

namespace cuda {
void last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads, int head_dim,
                     std::size_t k_offset, float* rows, void* stream = nullptr);
}  // namespace cuda

// The model's entry (op_target.hpp).
namespace ops {
void last_query_rows(const OpTarget& at, const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads,
                     int head_dim, std::size_t k_offset, float* rows);
}  // namespace ops

}  // namespace midtune::engine
