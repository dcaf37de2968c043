// CUDA body of block_gemv (contract: block_gemv.hpp): a product of few rows
// straight from the weights' ggml blocks, with no bf16 copy of the matrix in
// memory (the tile path writes and reads 2 bytes a weight besides reading
// the blocks: a Q4_K matrix's traffic four times over, for one to a few
// dozen rows of work). The design of llama.cpp's mul_mat_vec kernels,
// without their int8 activations (see below):
// - a thread block of kGemvWarps warps, each warp kGemvOutputs output rows
//   (weight rows), all sharing one chunk of the activations in shared
//   memory (block_gemv_body.hpp: each thread's work, host-tested);
// - each lane takes units of 8 weights (block_units.hpp) 32 units apart, so
//   a warp reads neighbouring bytes of a row (a K-quant block is 32 units:
//   one per lane), dequantises them in registers with the host's
//   arithmetic and rounds them to bf16 (what the tile would hold);
// - fp32 FMAs into kRows x kOutputs accumulators per lane (a product of two
//   bf16 values is exact in fp32: only the order of the sums differs from
//   cuBLAS over the tile), then a warp-shuffle sum.
// Activations stay bf16 in shared memory: they are the very bf16 values the
// tile path gives cuBLAS (DeviceOps::matmul rounds them once for either
// path), and at 2 bytes they take half the shared-memory bandwidth of fp32,
// which at 16 rows is what bounds this loop (one 8-byte load feeds 4
// weights of kOutputs rows; unpacking a bf16 is one integer op).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/block_gemv.hpp"
#include "backends/engine/ops/block_gemv_body.hpp"
#include "backends/engine/ops/block_units.hpp"
#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_reduce.cuh"

namespace midtune::engine::cuda {

namespace {

using blocks::kGemvOutputs;
using blocks::kGemvWarps;

template <std::uint32_t kType, int kRows>
__global__ void __launch_bounds__(kGemvWarps * 32)
    block_gemv_kernel(const std::uint8_t* __restrict__ weights, std::size_t row_bytes, int outputs, int cols,
                      int chunk, const std::uint16_t* __restrict__ x, std::size_t ld_x, int rows,
                      float* __restrict__ y, std::size_t ld_y) {
  constexpr int kOutputs = kGemvOutputs<kRows>;
  extern __shared__ uint4 shared_x[];  // [kRows][chunk] bf16
  auto* xs = reinterpret_cast<std::uint16_t*>(shared_x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_output = (blockIdx.x * kGemvWarps + warp) * kOutputs;
  const int first_row = blockIdx.y * kRows;
  const int rows_here = min(kRows, rows - first_row);
  // A warp past the last output reads the last row (and writes nothing):
  // every warp must reach the barriers.
  const std::uint8_t* w_rows[kOutputs];
  for (int o = 0; o < kOutputs; ++o) w_rows[o] = weights + min(first_output + o, outputs - 1) * row_bytes;
  float acc[kOutputs][kRows] = {};
  for (int c0 = 0; c0 < cols; c0 += chunk) {
    const int width = min(chunk, cols - c0);  // whole blocks
    blocks::stage_rows<kRows>(threadIdx.x, blockDim.x, x, ld_x, first_row, rows_here, c0, width, chunk, xs);
    __syncthreads();
    if (first_output < outputs) blocks::lane_sums<kType, kRows>(w_rows, xs, chunk, c0, width, lane, acc);
    __syncthreads();
  }
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sum = warp_sum(acc[o][r]);
      if (lane == 0 && r < rows_here && first_output + o < outputs) {
        y[(first_row + r) * ld_y + first_output + o] = sum;
      }
    }
  }
}

template <std::uint32_t kType, int kRows>
void launch(const std::uint8_t* weights, std::size_t row_bytes, int outputs, int cols, const std::uint16_t* x,
            std::size_t ld_x, int rows, float* y, std::size_t ld_y, cudaStream_t stream) {
  const int chunk = blocks::gemv_chunk<kRows>(cols);
  constexpr int kBlockOutputs = kGemvWarps * kGemvOutputs<kRows>;
  const dim3 grid((outputs + kBlockOutputs - 1) / kBlockOutputs, (rows + kRows - 1) / kRows);
  const std::size_t shared = static_cast<std::size_t>(kRows) * chunk * sizeof(std::uint16_t);
  block_gemv_kernel<kType, kRows><<<grid, kGemvWarps * 32, shared, stream>>>(weights, row_bytes, outputs, cols, chunk, x,
                                                                        ld_x, rows, y, ld_y);
}

std::invalid_argument bad_arguments(std::uint32_t type, std::size_t row_bytes, int outputs, int cols,
                                    std::size_t ld_x, int rows, std::size_t ld_y, const std::string& why) {
  return std::invalid_argument("block_gemv (cuda): ggml type " + std::to_string(type) + ", " + std::to_string(rows) +
                               " rows x " + std::to_string(cols) + " inputs (stride " + std::to_string(ld_x) +
                               ") -> " + std::to_string(outputs) + " outputs (stride " + std::to_string(ld_y) +
                               "), " + std::to_string(row_bytes) + " bytes a weight row: " + why);
}

}  // namespace

void block_gemv(std::uint32_t ggml_type, const void* data, std::size_t row_bytes, int outputs, int cols,
                const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y, void* stream) {
  const auto bad = [&](const std::string& why) {
    return bad_arguments(ggml_type, row_bytes, outputs, cols, ld_x, rows, ld_y, why);
  };
  if (outputs < 0 || rows < 0 || cols <= 0 || ld_x < static_cast<std::size_t>(cols) ||
      ld_y < static_cast<std::size_t>(outputs)) {
    throw bad("a negative or empty shape, or a stride under its width");
  }
  // 16-byte loads of x, 16-bit loads of the blocks.
  if (ld_x % 8 != 0 || reinterpret_cast<std::uintptr_t>(x) % 16 != 0) throw bad("x's rows are not 16-byte aligned");
  if (row_bytes % 2 != 0 || reinterpret_cast<std::uintptr_t>(data) % 2 != 0) throw bad("blocks not 2-byte aligned");
  const auto* weights = static_cast<const std::uint8_t*>(data);
  const cudaStream_t s = as_stream(stream);
  const bool known = blocks::with_block_type(ggml_type, [&](auto tag) {
    constexpr std::uint32_t kType = decltype(tag)::value;
    using Shape = blocks::Shape<kType>;
    if (cols % Shape::kElements != 0 ||
        row_bytes < static_cast<std::size_t>(cols / Shape::kElements) * Shape::kBytes) {
      throw bad("the columns do not fill whole blocks of the row");
    }
    if (outputs == 0 || rows == 0) return;
    blocks::with_rows_per_pass(rows, [&](auto rows_per_pass) {
      launch<kType, decltype(rows_per_pass)::value>(weights, row_bytes, outputs, cols, x, ld_x, rows, y, ld_y, s);
    });
  });
  if (!known) throw bad("not a block type the GPU keeps");
  check_launch("block_gemv");
}

}  // namespace midtune::engine::cuda
