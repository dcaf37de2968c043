#include "backends/engine/ops/weight_matrix.hpp"

#include <algorithm>

#include "backends/engine/ops/float_matmul.hpp"
#include "backends/engine/ops/matmul.hpp"

namespace midtune::engine {

WeightMatrix WeightMatrix::from_parts(const std::vector<MatrixPart>& parts, int cols, bool dequantise_to_f32,
                                      PackLayout layout) {
  WeightMatrix w;
  const bool all_float =
      !parts.empty() && std::all_of(parts.begin(), parts.end(), [](const MatrixPart& p) { return is_float_type(p.type); });
  if (all_float) {
    w.form_ = float_matrices(parts, cols);
  } else if (dequantise_to_f32) {
    w.form_ = float_matrices(parts, cols, /*dequantise_to_f32=*/true);
  } else {
    w.form_ = pack_matrices(parts, cols, layout);
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
