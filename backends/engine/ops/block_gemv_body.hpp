// The work of one thread of block_gemv_cuda.cu's kernel, compiled for the
// device and the host: the thread block's tiling, its share of staging the
// activations in shared memory (stage_rows), and one lane's partial sums
// over a chunk of columns (lane_sums). The kernel calls these; on the host
// block_gemv_test runs every thread of every thread block through them
// (the barriers between the phases, the warp's sum) and compares with
// block_gemv_host, so the kernel's index arithmetic is tested where there
// is no GPU. C++17.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/engine/ops/block_units.hpp"
#include "backends/engine/ops/elementwise.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace midtune::engine::blocks {

constexpr int kGemvWarps = 8;      // a thread block's
constexpr int kGemvMaxRows = 16;  // token rows per pass; more rows take more passes (gridDim.y)
// Weight rows per warp, by token rows per pass. Every thread block copies
// its rows of x (kRows x cols bf16) from L2 into shared memory, so a block
// covers more weight rows as kRows grows, to keep that copy near the
// block's own weight bytes (Q4_K: 0.56 bytes a weight; at 16 rows, 32
// weight rows read 18 bytes of blocks per column against 32 of x); and a
// warp's weight rows share each activation load. Few rows a block at one
// token row: more blocks, to hide the latency of the weight reads.
template <int kRows>
constexpr int kGemvOutputs = kRows == 1 ? 1 : kRows <= 4 ? 2 : 4;
// bf16 activations in shared memory at once (32 KiB, under the 48 KiB a
// launch gets without opting in): kGemvMaxRows rows of 1024 columns, or
// 16384 columns of one token row (a whole row of most models). A multiple
// of 256 columns a row, so a chunk holds whole blocks.
constexpr int kGemvSharedValues = 16384;

// Calls f(std::integral_constant<int, kRows>) with the token rows a pass
// takes for `rows` rows: 1, 2, 4, 8 or kGemvMaxRows (in several passes).
template <typename F>
void with_rows_per_pass(int rows, F&& f) {
  if (rows <= 1) {
    f(std::integral_constant<int, 1>{});
  } else if (rows <= 2) {
    f(std::integral_constant<int, 2>{});
  } else if (rows <= 4) {
    f(std::integral_constant<int, 4>{});
  } else if (rows <= 8) {
    f(std::integral_constant<int, 8>{});
  } else {
    f(std::integral_constant<int, kGemvMaxRows>{});
  }
}

// Columns of x a chunk holds at kRows rows.
template <int kRows>
constexpr int gemv_chunk(int cols) {
  return cols < kGemvSharedValues / kRows ? cols : kGemvSharedValues / kRows;
}

// 8 bf16 values (16 bytes, aligned) from `from` to `to`.
MIDTUNE_HOST_DEVICE inline void copy8(const std::uint16_t* from, std::uint16_t* to) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
#else
  std::memcpy(to, from, 16);
#endif
}

// 4 bf16 values (8 bytes, aligned) as floats.
MIDTUNE_HOST_DEVICE inline void load4(const std::uint16_t* p, float* out) {
  std::uint32_t pair[2];
#if defined(__CUDA_ARCH__)
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  pair[0] = v.x;
  pair[1] = v.y;
  for (int k = 0; k < 2; ++k) {
    out[2 * k] = __uint_as_float(pair[k] << 16);
    out[2 * k + 1] = __uint_as_float(pair[k] & 0xffff0000u);
  }
#else
  std::memcpy(pair, p, 8);
  for (int k = 0; k < 2; ++k) {
    const std::uint32_t lo = pair[k] << 16, hi = pair[k] & 0xffff0000u;
    std::memcpy(&out[2 * k], &lo, 4);
    std::memcpy(&out[2 * k + 1], &hi, 4);
  }
#endif
}

// w[0..7] rounded to bf16 (nearest even, as elementwise::bf16_bits: the
// same bits for every number, a NaN stays a NaN), the device two at a time.
MIDTUNE_HOST_DEVICE inline void round_to_bf16(float* w) {
  for (int j = 0; j < kUnitWeights; j += 2) {
#if defined(__CUDA_ARCH__)
    const __nv_bfloat162 pair = __floats2bfloat162_rn(w[j], w[j + 1]);
    const std::uint32_t bits = *reinterpret_cast<const std::uint32_t*>(&pair);
    w[j] = __uint_as_float(bits << 16);
    w[j + 1] = __uint_as_float(bits & 0xffff0000u);
#else
    for (int k = j; k < j + 2; ++k) {
      const std::uint32_t bits = static_cast<std::uint32_t>(elementwise::bf16_bits(w[k])) << 16;
      std::memcpy(&w[k], &bits, 4);
    }
#endif
  }
}

// Thread `thread` (of `threads`) stages its share of rows [first_row,
// first_row + kRows) of x, columns [c0, c0 + width), into xs ([kRows]
// [chunk]); rows from rows_here on as zeros (never written out).
template <int kRows>
MIDTUNE_HOST_DEVICE inline void stage_rows(int thread, int threads, const std::uint16_t* x, std::size_t ld_x,
                                           int first_row, int rows_here, int c0, int width, int chunk,
                                           std::uint16_t* xs) {
  const int vectors = width / 8;  // 16-byte copies a row
  for (int i = thread; i < kRows * vectors; i += threads) {
    const int r = i / vectors, v = i % vectors;
    std::uint16_t* to = xs + r * chunk + 8 * v;
    if (r < rows_here) {
      copy8(x + (first_row + r) * ld_x + c0 + 8 * v, to);
    } else {
      for (int k = 0; k < 8; ++k) to[k] = 0;
    }
  }
}

// Lane `lane`'s units of a chunk (columns [c0, c0 + width), whole blocks,
// staged in xs) of the weight rows w_rows, added into acc[o][r]: units lane,
// lane + 32, ... (a warp reads neighbouring bytes).
template <std::uint32_t kType, int kRows>
MIDTUNE_HOST_DEVICE inline void lane_sums(const std::uint8_t* const* w_rows, const std::uint16_t* xs, int chunk,
                                          int c0, int width, int lane, float (*acc)[kRows]) {
  using BlockShape = Shape<kType>;
  constexpr int kOutputs = kGemvOutputs<kRows>;
  const int first_unit = c0 / kUnitWeights;
  // At one or two token rows a unit is little arithmetic: four of a lane's
  // units unrolled keep more weight reads in flight.
#if defined(__CUDACC__)
#pragma unroll(kRows <= 2 ? 4 : 1)
#endif
  for (int u = lane; u < width / kUnitWeights; u += 32) {
    const int block = (first_unit + u) / kUnits<kType>, in_block = (first_unit + u) % kUnits<kType>;
    float w[kOutputs][kUnitWeights];
    int first = 0, gap = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int o = 0; o < kOutputs; ++o) {
      unit_weights<kType>(w_rows[o] + static_cast<std::size_t>(block) * BlockShape::kBytes, in_block, w[o], first,
                          gap);
      round_to_bf16(w[o]);
    }
    const int column = block * BlockShape::kElements - c0 + first;  // in the chunk; a multiple of 4
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int r = 0; r < kRows; ++r) {
      float xv[kUnitWeights];
      load4(xs + r * chunk + column, xv);
      load4(xs + r * chunk + column + gap, xv + 4);
#if defined(__CUDACC__)
#pragma unroll
#endif
      for (int o = 0; o < kOutputs; ++o) {
#if defined(__CUDACC__)
#pragma unroll
#endif
        for (int j = 0; j < kUnitWeights; ++j) acc[o][r] = fmaf(w[o][j], xv[j], acc[o][r]);
      }
    }
  }
}

}  // namespace midtune::engine::blocks
