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

}  // namespace midtune::engine
