// Float weights kept at the precision the GGUF stores them in (F32, F16,
// BF16), for the float matmul (ops/float_matmul.hpp): an F32 model then gives
// its fp32 answers instead of those of an 8-bit requantisation
// (ops/packed_matrix.hpp).
//
// Rows are interleaved 16 at a time, as the int8 packing does: for row group
// g and input column k, the 16 weights of rows 16g..16g+15 are contiguous
// (one zmm, two ymm), so a kernel broadcasts x[t][k] and multiplies it into 16
// output rows at once. Rows past the end of the matrix are zero. Element size:
// 4 bytes (fp32) or 2 (fp16, bf16: converted to fp32 in the kernel).
//
// bf16 goes by column pairs instead: for row group g and columns 2j, 2j+1 the
// 32 values row 0 col 2j, row 0 col 2j+1, row 1 col 2j, ... are contiguous,
// so that one 32-bit lane holds one row's pair, the operand layout of the
// AVX512-BF16 dot product (vdpbf16ps); the fp32 kernels split a pair with a
// shift and a mask. An odd column count is padded with a zero column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/ops/aligned_buffer.hpp"
#include "backends/engine/ops/packed_matrix.hpp"

namespace midtune::engine {

enum class FloatFormat { f32, f16, bf16 };

struct FloatMatrix {
  int rows = 0;    // outputs N
  int cols = 0;    // inputs K
  int groups = 0;  // ceil(N / 16)
  FloatFormat format = FloatFormat::f32;
  AlignedBuffer<std::uint8_t> data;  // [group][col][16] elements

  std::size_t element_bytes() const { return format == FloatFormat::f32 ? 4 : 2; }
  // Columns as stored: bf16 rounds up to whole pairs.
  int stored_cols() const { return format == FloatFormat::bf16 ? (cols + 1) / 2 * 2 : cols; }
  std::size_t group_bytes() const { return static_cast<std::size_t>(stored_cols()) * kPackRows * element_bytes(); }
  // Byte offset of (row within its group, col) inside a group.
  std::size_t offset_in_group(int row_in_group, int col) const {
    const std::size_t at = format == FloatFormat::bf16
                               ? static_cast<std::size_t>(col / 2) * 2 * kPackRows + row_in_group * 2 + col % 2
                               : static_cast<std::size_t>(col) * kPackRows + row_in_group;
    return at * element_bytes();
  }
  const std::uint8_t* group(int g) const { return data.data() + static_cast<std::size_t>(g) * group_bytes(); }
  std::uint8_t* group(int g) { return data.data() + static_cast<std::size_t>(g) * group_bytes(); }
  // One weight as a float (the scalar reference reads weights through this).
  float weight(int row, int col) const;
};

// F32, F16 and BF16: the types this form keeps exactly.
bool is_float_type(GgmlType type);

// Stores several float matrices of the same column count one below the other
// (Q, K and V; gate and up). All F16 -> fp16, all BF16 -> bf16, otherwise fp32
// (exact for a mix of float types). With dequantise_to_f32, parts of any type
// are taken, dequantised row by row to fp32 (backend.precision: fp32).
// Throws std::invalid_argument for a part of a non-float type (unless
// dequantise_to_f32), with rows <= 0, or cols not whole blocks of its type.
FloatMatrix float_matrices(const std::vector<MatrixPart>& parts, int cols, bool dequantise_to_f32 = false);

}  // namespace midtune::engine
