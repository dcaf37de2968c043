// CUDA body of the GPU's weight dequantisation (contract: cuda_ops.hpp): one
// thread per unit of 8 weights (block_units.hpp: the host-tested reading of
// every block layout, dequant_cpu.cpp's float operations in the same order,
// never contracted into an FMA), so that the bf16 bits equal the host's.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/block_units.hpp"
#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

namespace {

constexpr std::uint32_t kBF16 = 30;  // ggml's id

template <std::uint32_t kType>
__global__ void dequantize_kernel(const std::uint8_t* data, std::size_t row_bytes, int rows, int cols,
                                  std::uint16_t* out) {
  using Shape = blocks::Shape<kType>;
  const int units = cols / blocks::kUnitWeights;  // a row's
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * units) return;
  const std::size_t r = i / units;
  const int unit = static_cast<int>(i % units);
  const int block = unit / blocks::kUnits<kType>;
  float w[blocks::kUnitWeights];
  int first = 0, gap = 0;
  blocks::unit_weights<kType>(data + r * row_bytes + static_cast<std::size_t>(block) * Shape::kBytes,
                              unit % blocks::kUnits<kType>, w, first, gap);
  std::uint16_t* o = out + r * cols + static_cast<std::size_t>(block) * Shape::kElements + first;
  for (int j = 0; j < 4; ++j) {
    o[j] = elementwise::bf16_bits(w[j]);
    o[gap + j] = elementwise::bf16_bits(w[4 + j]);
  }
}

__global__ void copy_bf16_rows(const std::uint8_t* data, std::size_t row_bytes, int rows, int cols,
                               std::uint16_t* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * cols) return;
  const std::size_t r = i / cols;
  const int c = static_cast<int>(i % cols);
  const std::uint8_t* p = data + r * row_bytes + 2 * static_cast<std::size_t>(c);
  out[i] = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

std::invalid_argument bad_shape(std::uint32_t type, std::size_t row_bytes, int rows, int cols) {
  return std::invalid_argument("dequantize_bf16 (cuda): ggml type " + std::to_string(type) + ", " +
                               std::to_string(rows) + " rows of " + std::to_string(cols) + " columns, " +
                               std::to_string(row_bytes) + " bytes a row");
}

}  // namespace

void dequantize_bf16(std::uint32_t ggml_type, const void* data, std::size_t row_bytes, int rows, int cols,
                     std::uint16_t* out, void* stream) {
  if (rows < 0 || cols <= 0) throw bad_shape(ggml_type, row_bytes, rows, cols);
  if (rows == 0) return;
  const bool known = blocks::with_block_type(ggml_type, [&](auto tag) {
    constexpr std::uint32_t kType = decltype(tag)::value;
    using Shape = blocks::Shape<kType>;
    if (cols % Shape::kElements != 0 ||
        row_bytes < static_cast<std::size_t>(cols / Shape::kElements) * Shape::kBytes || row_bytes % 2 != 0 ||
        reinterpret_cast<std::uintptr_t>(data) % 2 != 0) {
      throw bad_shape(ggml_type, row_bytes, rows, cols);
    }
    const std::size_t units = static_cast<std::size_t>(rows) * (cols / blocks::kUnitWeights);
    dequantize_kernel<kType><<<blocks_for(units), kThreadsPerBlock, 0, as_stream(stream)>>>(
        static_cast<const std::uint8_t*>(data), row_bytes, rows, cols, out);
  });
  if (!known && ggml_type == kBF16) {
    if (row_bytes < 2 * static_cast<std::size_t>(cols)) throw bad_shape(ggml_type, row_bytes, rows, cols);
    const std::size_t count = static_cast<std::size_t>(rows) * cols;
    copy_bf16_rows<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(
        static_cast<const std::uint8_t*>(data), row_bytes, rows, cols, out);
  } else if (!known) {
    throw std::invalid_argument("dequantize_bf16 (cuda): ggml type " + std::to_string(ggml_type) +
                                " is not kept in blocks on the device");
  }
  check_launch("dequantize_bf16");
}

}  // namespace midtune::engine::cuda
