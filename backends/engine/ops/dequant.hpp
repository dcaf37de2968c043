// Scalar dequantisation of ggml tensor rows (the reference for every
// quantised kernel): block layouts as in ggml-common.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/engine/gguf/gguf.hpp"

namespace midtune::engine {

// Elements per block of `type` (1 for float types, 32, or 256 for k-quants).
std::size_t block_elements(GgmlType type);
// Bytes per block of `type`.
std::size_t block_bytes(GgmlType type);

// Dequantises `count` elements (a multiple of block_elements(type)) starting
// at `src` into `dst`. Throws std::invalid_argument for a count that is not.
void dequantize_row(GgmlType type, const void* src, float* dst, std::size_t count);

// The 32 five-bit values (0..31) of a Q5_0 / Q5_1 block from its qh (4 bytes)
// and qs (16 bytes).
void q5_values(const std::uint8_t* qh_bytes, const std::uint8_t* qs, int* q);

// One 32-element sub-block of a Q4_K / Q5_K super-block: x = scale * q - min,
// q in 0..15 (Q4_K) or 0..31 (Q5_K); scale and min are the fp32 products of
// the block's fp16 d / dmin and the sub-block's 6-bit factors.
struct KSubBlock {
  float scale = 0.0f;
  float min = 0.0f;
  std::uint8_t q[32] = {};
};
// The 8 sub-blocks of one Q4_K / Q5_K block (256 elements). Throws
// std::invalid_argument for another type.
void k_sub_blocks(GgmlType type, const std::uint8_t* block, KSubBlock* out);

}  // namespace midtune::engine
