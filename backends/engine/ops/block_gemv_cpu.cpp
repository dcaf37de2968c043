#include "backends/engine/ops/block_gemv.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/engine/ops/block_units.hpp"
#include "backends/engine/ops/fp16.hpp"

namespace midtune::engine {

void block_gemv_host(std::uint32_t ggml_type, const void* data, std::size_t row_bytes, int outputs, int cols,
                     const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) {
  if (outputs < 0 || rows < 0 || cols <= 0 || ld_x < static_cast<std::size_t>(cols) ||
      ld_y < static_cast<std::size_t>(outputs)) {
    throw std::invalid_argument("block_gemv (host): " + std::to_string(rows) + " rows x " + std::to_string(cols) +
                                " inputs -> " + std::to_string(outputs) + " outputs, strides " +
                                std::to_string(ld_x) + ", " + std::to_string(ld_y));
  }
  const auto* base = static_cast<const std::uint8_t*>(data);
  const bool known = blocks::with_block_type(ggml_type, [&](auto tag) {
    constexpr std::uint32_t kType = decltype(tag)::value;
    using Shape = blocks::Shape<kType>;
    if (cols % Shape::kElements != 0 ||
        row_bytes < static_cast<std::size_t>(cols / Shape::kElements) * Shape::kBytes) {
      throw std::invalid_argument("block_gemv (host): ggml type " + std::to_string(ggml_type) + ", " +
                                  std::to_string(cols) + " columns in " + std::to_string(row_bytes) +
                                  " bytes a row");
    }
    std::vector<double> sums(static_cast<std::size_t>(rows));
    for (int o = 0; o < outputs; ++o) {
      std::fill(sums.begin(), sums.end(), 0.0);
      for (int b = 0; b < cols / Shape::kElements; ++b) {
        const std::uint8_t* block = base + o * row_bytes + static_cast<std::size_t>(b) * Shape::kBytes;
        for (int u = 0; u < blocks::kUnits<kType>; ++u) {
          float w[blocks::kUnitWeights];
          int first = 0, gap = 0;
          blocks::unit_weights<kType>(block, u, w, first, gap);
          for (int j = 0; j < blocks::kUnitWeights; ++j) {
            const double weight = bf16_to_float(elementwise::bf16_bits(w[j]));
            const std::size_t k = static_cast<std::size_t>(b) * Shape::kElements + first + j % 4 + (j < 4 ? 0 : gap);
            for (int r = 0; r < rows; ++r) sums[r] += weight * bf16_to_float(x[r * ld_x + k]);
          }
        }
      }
      for (int r = 0; r < rows; ++r) y[r * ld_y + o] = static_cast<float>(sums[r]);
    }
  });
  if (!known) {
    throw std::invalid_argument("block_gemv (host): ggml type " + std::to_string(ggml_type) +
                                " is not a block type the GPU keeps");
  }
}

}  // namespace midtune::engine
