// Two attentions of the same queries over disjoint sets of keys, merged into
// the attention over both sets: with l_a, l_b each part's log-sum-exp
// (log sum_k exp(score_k) over its keys, AttentionReadouts::log_sum_exp),
//   w = 1 / (1 + exp(l_b - l_a)),   a <- w a + (1 - w) b
// per query and head (the softmax over the union weighs each part by its
// share of the denominator; FlashAttention's split-key merge, Dao et al.
// 2022). A remapped attention (SelfExtend, STRING) runs its near keys and
// its far keys as two attentions and merges them with this.
//   a: rows [rows][a_ld], head h at h * head_dim, updated in place
//   b: rows [rows][b_ld], the same heads
//   lse_a[h * lse_a_ld + t], lse_b[h * lse_b_ld + t] for t < rows
// Bodies: scalar here (merge_attention_cpu.cpp), CUDA in merge_attention_cuda.cu.
#pragma once

#include <cstddef>

#include "backends/engine/ops/op_target.hpp"

namespace midtune::engine {

// Throws std::invalid_argument on bad shapes.
void merge_attention_rows(float* a, std::size_t a_ld, const float* lse_a, std::size_t lse_a_ld, const float* b,
                          std::size_t b_ld, const float* lse_b, std::size_t lse_b_ld, int rows, int heads,
                          int head_dim);

namespace cuda {
void merge_attention(float* a, std::size_t a_ld, const float* lse_a, std::size_t lse_a_ld, const float* b,
                     std::size_t b_ld, const float* lse_b, std::size_t lse_b_ld, int rows, int heads, int head_dim,
                     void* stream = nullptr);
}  // namespace cuda

// The model's entry (op_target.hpp).
namespace ops {
void merge_attention(const OpTarget& at, float* a, std::size_t a_ld, const float* lse_a, std::size_t lse_a_ld,
                     const float* b, std::size_t b_ld, const float* lse_b, std::size_t lse_b_ld, int rows, int heads,
                     int head_dim);
}  // namespace ops

}  // namespace midtune::engine
