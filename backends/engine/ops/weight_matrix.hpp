// A weight matrix of the model in the form its GGUF type calls for, with one
// matmul entry point:
//   - F32 / F16 / BF16 parts keep their precision (ops/float_matrix.hpp,
//     fp32 activations and accumulation): a model runs at its own precision;
//   - any integer quant type (Q4_0, Q4_1, Q5_x, Q8_0, K-quants, IQ4) takes the
//     int8 path (ops/packed_matrix.hpp: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0
//     exactly, Q4_K / Q5_K with fp16-rounded sub-block factors, the others
//     requantised to 8 bits per block) with int8 activations, the choice
//     llama.cpp makes for these types (its quantised vec_dot quantises the
//     activations to Q8 too).
// A fused matrix (Q|K|V, gate|up) is float only when every part is float.
// On request (`backend.precision: fp32`) every part is dequantised to F32
// instead: the file's values exactly, fp32 activations, 4 bytes a weight.
#pragma once

#include <cstddef>
#include <variant>
#include <vector>

#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/float_matrix.hpp"
#include "backends/engine/ops/packed_matrix.hpp"
#include "backends/engine/ops/quantize_rows.hpp"

namespace midtune::engine {

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // Parts stacked one below the other, all of `cols` columns; a packed form
  // in `layout` (packed_layout_for the ISA that will multiply). Throws
  // std::invalid_argument as pack_matrices / float_matrices do.
  static WeightMatrix from_parts(const std::vector<MatrixPart>& parts, int cols, bool dequantise_to_f32 = false,
                                 PackLayout layout = PackLayout::bytes);

  int rows() const;
  int cols() const;
  bool is_float() const { return std::holds_alternative<FloatMatrix>(form_); }
  const PackedMatrix* packed() const { return std::get_if<PackedMatrix>(&form_); }
  const FloatMatrix* float_form() const { return std::get_if<FloatMatrix>(&form_); }
  // Bytes the weights occupy in memory.
  std::size_t bytes() const;

  // y[t][n] = sum_k x[t][k] W[n][k] for `tokens` rows of x (stride ldx) into
  // y (stride ldy >= rows()). `scratch` holds the int8 activations of the
  // packed form (unused by the float form).
  void matmul(const float* x, int tokens, std::size_t ldx, float* y, std::size_t ldy, QuantizedRows& scratch,
              Isa isa) const;

 private:
  std::variant<PackedMatrix, FloatMatrix> form_;
};

}  // namespace midtune::engine
