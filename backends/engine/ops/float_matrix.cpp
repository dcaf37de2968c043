#include "backends/engine/ops/float_matrix.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/fp16.hpp"

namespace midtune::engine {

bool is_float_type(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
}

float FloatMatrix::weight(int row, int col) const {
  const std::uint8_t* at = group(row / kPackRows) + offset_in_group(row % kPackRows, col);
  if (format == FloatFormat::f32) {
    float v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, at, sizeof h);
  return format == FloatFormat::f16 ? fp16_to_float(h) : bf16_to_float(h);
}

FloatMatrix float_matrices(const std::vector<MatrixPart>& parts, int cols, bool dequantise_to_f32) {
  if (parts.empty() || cols <= 0) throw std::invalid_argument("float_matrices: nothing to store");
  FloatMatrix m;
  m.cols = cols;
  const GgmlType first = parts.front().type;
  bool same_type = true;
  for (const MatrixPart& part : parts) {
    const GgmlTypeInfo& info = ggml_type_info(part.type);
    if ((!dequantise_to_f32 && !is_float_type(part.type)) || part.rows <= 0 ||
        cols % static_cast<int>(info.block_elems) != 0) {
      throw std::invalid_argument("float_matrices: " + std::to_string(part.rows) + " x " + std::to_string(cols) +
                                  " " + info.name + " matrix: needs rows > 0 and " +
                                  (dequantise_to_f32 ? "whole blocks of its type" : "a float type (F32, F16, BF16)"));
    }
    same_type = same_type && part.type == first;
    m.rows += part.rows;
  }
  m.format = dequantise_to_f32 || !same_type || first == GgmlType::F32 ? FloatFormat::f32
             : first == GgmlType::F16                                 ? FloatFormat::f16
                                                                      : FloatFormat::bf16;
  m.groups = (m.rows + kPackRows - 1) / kPackRows;
  m.data.resize(static_cast<std::size_t>(m.groups) * m.group_bytes());
  std::vector<float> row(static_cast<std::size_t>(cols));
  int out_row = 0;
  for (const MatrixPart& part : parts) {
    const GgmlTypeInfo& info = ggml_type_info(part.type);
    const std::size_t src_row_bytes = static_cast<std::size_t>(cols) / info.block_elems * info.block_bytes;
    for (int r = 0; r < part.rows; ++r, ++out_row) {
      const auto* src = static_cast<const std::uint8_t*>(part.data) + static_cast<std::size_t>(r) * src_row_bytes;
      std::uint8_t* dst = m.group(out_row / kPackRows);
      const int in_group = out_row % kPackRows;
      if (m.format == FloatFormat::f32) {
        dequantize_row(part.type, src, row.data(), static_cast<std::size_t>(cols));
        for (int k = 0; k < cols; ++k) std::memcpy(dst + m.offset_in_group(in_group, k), &row[k], 4);
      } else {  // the stored 16-bit values, bit for bit
        for (int k = 0; k < cols; ++k) std::memcpy(dst + m.offset_in_group(in_group, k), src + 2 * k, 2);
      }
    }
  }
  return m;
}

}  // namespace midtune::engine
