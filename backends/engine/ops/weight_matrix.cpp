#include "backends/engine/ops/weight_matrix.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/float_matmul.hpp"
#include "backends/engine/ops/matmul.hpp"

namespace midtune::engine {

WeightMatrix WeightMatrix::from_parts(const std::vector<MatrixPart>& parts, int cols, bool dequantise_to_f32) {
  WeightMatrix w;
  const bool all_float =
      !parts.empty() && std::all_of(parts.begin(), parts.end(), [](const MatrixPart& p) { return is_float_type(p.type); });
  if (dequantise_to_f32 && !all_float) {
    // Each part's rows as F32 (float_matrices copies them into its own layout).
    std::vector<std::vector<float>> values(parts.size());
    std::vector<MatrixPart> f32_parts;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const MatrixPart& p = parts[i];
      values[i].resize(static_cast<std::size_t>(p.rows) * cols);
      const GgmlTypeInfo& info = ggml_type_info(p.type);
      if (cols % static_cast<int>(info.block_elems) != 0) {
        throw std::invalid_argument(std::to_string(cols) + " columns are not whole " + info.name + " blocks");
      }
      const std::size_t row_bytes = static_cast<std::size_t>(cols) / info.block_elems * info.block_bytes;
      for (int r = 0; r < p.rows; ++r) {
        dequantize_row(p.type, static_cast<const std::byte*>(p.data) + static_cast<std::size_t>(r) * row_bytes,
                       values[i].data() + static_cast<std::size_t>(r) * cols, cols);
      }
      f32_parts.push_back(MatrixPart{GgmlType::F32, values[i].data(), p.rows});
    }
    w.form_ = float_matrices(f32_parts, cols);
  } else if (all_float) {
    w.form_ = float_matrices(parts, cols);
  } else {
    w.form_ = pack_matrices(parts, cols);
  }
  return w;
}

int WeightMatrix::rows() const {
  return std::visit([](const auto& m) { return m.rows; }, form_);
}

int WeightMatrix::cols() const {
  return std::visit([](const auto& m) { return m.cols; }, form_);
}

std::size_t WeightMatrix::bytes() const {
  return std::visit([](const auto& m) { return m.data.size() * sizeof(m.data[0]); }, form_);
}

void WeightMatrix::matmul(const float* x, int tokens, std::size_t ldx, float* y, std::size_t ldy,
                          QuantizedRows& scratch, Isa isa) const {
  if (const FloatMatrix* f = float_form()) {
    float_matmul(*f, x, tokens, ldx, y, ldy, isa);
    return;
  }
  const PackedMatrix& p = std::get<PackedMatrix>(form_);
  quantize_rows(x, tokens, p.cols, ldx, scratch, isa);
  packed_matmul(p, scratch, y, ldy, isa);
}

}  // namespace midtune::engine
