// CUDA body of block_gemv (contract: block_gemv.hpp): a product of few rows
// straight from the weights' ggml blocks, with no bf16 copy of the matrix in
// memory (the tile path writes and reads 2 bytes a weight besides reading
// the blocks: a Q4_K matrix's traffic four times over, for one to a few
// dozen rows of work). The design of llama.cpp's mul_mat_vec kernels,
// without their int8 activations (see below):
// - a thread block of kWarps warps, each warp Tiling::kOutputs output rows
//   (weight rows), all sharing one chunk of the activations in shared
//   memory;
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
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/block_gemv.hpp"
#include "backends/engine/ops/block_units.hpp"
#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_reduce.cuh"

namespace midtune::engine::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxRows = 16;  // token rows per pass; more rows take more passes (gridDim.y)
// Weight rows per warp, by token rows per pass. Every thread block copies
// its rows of x (kRows x cols bf16) from L2 into shared memory, so a block
// covers more weight rows as kRows grows, to keep that copy near the
// block's own weight bytes (Q4_K: 0.56 bytes a weight; at 16 rows, 32
// weight rows read 18 bytes of blocks per column against 32 of x); and a
// warp's weight rows share each activation load. Few rows a block at one
// token row: more blocks, to hide the latency of the weight reads.
template <int kRows>
struct Tiling {
  static constexpr int kOutputs = kRows == 1 ? 1 : kRows <= 4 ? 2 : 4;
};
// bf16 activations in shared memory at once (32 KiB, under the 48 KiB a
// launch gets without opting in): kMaxRows rows of 1024 columns, or 16384
// columns of one token row (a whole row of most models). A multiple of 256
// columns a row, so a chunk holds whole blocks.
constexpr int kSharedValues = 16384;

__device__ inline float low_bf16(std::uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ inline float high_bf16(std::uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }

// Rounds w[0..7] to bf16 (nearest even, as elementwise::bf16_bits: the same
// bits for every number; a NaN stays a NaN), two at a time.
__device__ inline void round_to_bf16(float* w) {
  for (int j = 0; j < blocks::kUnitWeights; j += 2) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(w[j], w[j + 1]);
    const std::uint32_t bits = *reinterpret_cast<const std::uint32_t*>(&pair);
    w[j] = low_bf16(bits);
    w[j + 1] = high_bf16(bits);
  }
}

template <std::uint32_t kType, int kRows>
__global__ void __launch_bounds__(kWarps * 32)
    block_gemv_kernel(const std::uint8_t* __restrict__ weights, std::size_t row_bytes, int outputs, int cols,
                      int chunk, const std::uint16_t* __restrict__ x, std::size_t ld_x, int rows,
                      float* __restrict__ y, std::size_t ld_y) {
  using Shape = blocks::Shape<kType>;
  constexpr int kUnits = blocks::kUnits<kType>;
  constexpr int kOutputs = Tiling<kRows>::kOutputs;
  extern __shared__ uint4 shared_x[];  // [kRows][chunk] bf16
  auto* xs = reinterpret_cast<std::uint16_t*>(shared_x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_output = (blockIdx.x * kWarps + warp) * kOutputs;
  const int first_row = blockIdx.y * kRows;
  const int rows_here = min(kRows, rows - first_row);
  // A warp past the last output reads the last row (and writes nothing):
  // every warp must reach the barriers.
  const std::uint8_t* w_rows[kOutputs];
  for (int o = 0; o < kOutputs; ++o) w_rows[o] = weights + min(first_output + o, outputs - 1) * row_bytes;
  float acc[kOutputs][kRows] = {};
  for (int c0 = 0; c0 < cols; c0 += chunk) {
    const int width = min(chunk, cols - c0);  // whole blocks
    const int vectors = width / 8;            // 16-byte loads a row
    for (int i = threadIdx.x; i < kRows * vectors; i += blockDim.x) {
      const int r = i / vectors, v = i % vectors;
      uint4 value = make_uint4(0, 0, 0, 0);  // rows past the last: zeros, never written out
      if (r < rows_here) value = *reinterpret_cast<const uint4*>(x + (first_row + r) * ld_x + c0 + 8 * v);
      reinterpret_cast<uint4*>(xs + r * chunk)[v] = value;
    }
    __syncthreads();
    if (first_output < outputs) {
      const int first_unit = c0 / blocks::kUnitWeights;
      // At one or two token rows a unit is little arithmetic: four of a
      // lane's units unrolled keep more weight reads in flight.
#pragma unroll(kRows <= 2 ? 4 : 1)
      for (int u = lane; u < width / blocks::kUnitWeights; u += 32) {
        const int block = (first_unit + u) / kUnits, in_block = (first_unit + u) % kUnits;
        float w[kOutputs][blocks::kUnitWeights];
        int first = 0, gap = 0;
#pragma unroll
        for (int o = 0; o < kOutputs; ++o) {
          blocks::unit_weights<kType>(w_rows[o] + static_cast<std::size_t>(block) * Shape::kBytes, in_block, w[o],
                                      first, gap);
          round_to_bf16(w[o]);
        }
        const int column = block * Shape::kElements - c0 + first;  // in the chunk; a multiple of 4
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const uint2 a = *reinterpret_cast<const uint2*>(xs + r * chunk + column);
          const uint2 b = *reinterpret_cast<const uint2*>(xs + r * chunk + column + gap);
          const float xv[blocks::kUnitWeights] = {low_bf16(a.x), high_bf16(a.x), low_bf16(a.y), high_bf16(a.y),
                                                  low_bf16(b.x), high_bf16(b.x), low_bf16(b.y), high_bf16(b.y)};
#pragma unroll
          for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
            for (int j = 0; j < blocks::kUnitWeights; ++j) acc[o][r] = fmaf(w[o][j], xv[j], acc[o][r]);
          }
        }
      }
    }
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
  const int chunk = std::min(cols, kSharedValues / kRows);
  constexpr int kBlockOutputs = kWarps * Tiling<kRows>::kOutputs;
  const dim3 grid((outputs + kBlockOutputs - 1) / kBlockOutputs, (rows + kRows - 1) / kRows);
  const std::size_t shared = static_cast<std::size_t>(kRows) * chunk * sizeof(std::uint16_t);
  block_gemv_kernel<kType, kRows><<<grid, kWarps * 32, shared, stream>>>(weights, row_bytes, outputs, cols, chunk, x,
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
    if (rows <= 1) {
      launch<kType, 1>(weights, row_bytes, outputs, cols, x, ld_x, rows, y, ld_y, s);
    } else if (rows <= 2) {
      launch<kType, 2>(weights, row_bytes, outputs, cols, x, ld_x, rows, y, ld_y, s);
    } else if (rows <= 4) {
      launch<kType, 4>(weights, row_bytes, outputs, cols, x, ld_x, rows, y, ld_y, s);
    } else if (rows <= 8) {
      launch<kType, 8>(weights, row_bytes, outputs, cols, x, ld_x, rows, y, ld_y, s);
    } else {
      launch<kType, kMaxRows>(weights, row_bytes, outputs, cols, x, ld_x, rows, y, ld_y, s);
    }
  });
  if (!known) throw bad("not a block type the GPU keeps");
  check_launch("block_gemv");
}

}  // namespace midtune::engine::cuda
