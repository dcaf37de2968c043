// The third CUDA body of attention (cuda_ops.hpp's contract, for calls of
// many queries): FlashAttention-2 (Dao 2023) tiles, the scores kept on the
// chip. Declared only in builds with CUDA (MIDTUNE_WITH_CUDA).
#pragma once

#if defined(MIDTUNE_WITH_CUDA)

#include <cstddef>
#include <cstdint>

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

// cuda_ops.hpp's attention() with the same arguments and readouts, for
// head_dim 1..256: per (block of 128 queries, query head) the keys stream
// through shared memory in tiles, scores and weights stay in registers (Q, K,
// V and the weights P rounded to fp16, products summed in fp32, the softmax
// online in fp32). The key-0 weights come from the main kernel; the last
// query's probability row (last_row) from a second pass over that one query
// (attention() itself, whose output then replaces the last row's: the
// readout and the output come from one computation). `workspace` (16-byte
// aligned) holds at least attention_flash_workspace(...) bytes: the call's
// keys and values in fp16, padded to whole tiles (0 for arguments the body
// refuses).
std::size_t attention_flash_workspace(int tokens, int past, int kv_heads, int head_dim);
void attention_flash(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
                     int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
                     const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
                     float* last_row, void* workspace, std::size_t workspace_bytes, void* stream = nullptr);
// The same over a bf16 cache (keys and values bf16 bits, each read as its
// exact float, elementwise::bf16_value, then rounded to fp16 as the fp32
// cache's are).
void attention_flash(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
                     std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window,
                     float scale, const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld,
                     float* key0_weight, float* last_row, void* workspace, std::size_t workspace_bytes,
                     void* stream = nullptr);

}  // namespace midtune::engine::cuda

#endif  // MIDTUNE_WITH_CUDA
