// CUDA body of the GPU's weight dequantisation (contract: cuda_ops.hpp): one
// thread per weight, each evaluating dequant_cpu.cpp's expression for its
// element with the same float operations in the same order (rounded products
// and sums, no FMA contraction: __fmul_rn / __fadd_rn / __fsub_rn), so that
// the bf16 bits equal the host's (ggml's block layouts, ggml-common.h).
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

namespace {

// ggml's type ids (gguf.hpp's GgmlType, which needs C++20).
enum Type : std::uint32_t { kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13,
                            kQ6_K = 14, kBF16 = 30 };

// Blocks are byte-aligned only (a Q4_0 block is 18 bytes): fields are read
// byte by byte.
__device__ float half_at(const std::uint8_t* p) {
  const unsigned short bits = static_cast<unsigned short>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}

__device__ std::uint32_t u32_at(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

// Element j of a 32-element block's 4-bit quants: low nibbles first.
__device__ int nibble(const std::uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4); }

// Element j of a Q5_0 / Q5_1 block (q5_values).
__device__ int q5_value(const std::uint8_t* qh_bytes, const std::uint8_t* qs, int j) {
  const std::uint32_t qh = u32_at(qh_bytes);
  if (j < 16) return (qs[j] & 0x0f) | static_cast<int>(((qh >> j) << 4) & 0x10);
  const int i = j - 16;
  return (qs[i] >> 4) | static_cast<int>((qh >> (i + 12)) & 0x10);
}

// Q4_K / Q5_K element j (k_sub_blocks): sub-block j / 32 of 8, x = scale * q - min.
__device__ float k_value(bool five_bits, const std::uint8_t* b, int j) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const std::uint8_t* scales = b + 4;
  const int sub = j / 32, l = j % 32;
  int sc, m;
  if (sub < 4) {
    sc = scales[sub] & 63;
    m = scales[sub + 4] & 63;
  } else {
    sc = (scales[sub + 4] & 0x0f) | ((scales[sub - 4] >> 6) << 4);
    m = (scales[sub + 4] >> 4) | ((scales[sub] >> 6) << 4);
  }
  const std::uint8_t* q = b + (five_bits ? 48 : 16) + 32 * (sub / 2);
  int value = (sub % 2 == 0) ? (q[l] & 0x0f) : (q[l] >> 4);
  if (five_bits && ((b[16 + l] >> sub) & 1)) value += 16;
  const float scale = __fmul_rn(d, static_cast<float>(sc));
  const float min = __fmul_rn(dmin, static_cast<float>(m));
  return __fsub_rn(__fmul_rn(scale, static_cast<float>(value)), min);
}

// Q6_K element j: two halves of 128, each four quarters of 32.
__device__ float q6_k_value(const std::uint8_t* b, int j) {
  const int n = j / 128, quarter = (j % 128) / 32, l = j % 32;
  const std::uint8_t* ql = b + 64 * n;
  const std::uint8_t* qh = b + 128 + 32 * n;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192 + 8 * n);
  const int lo = (quarter % 2 == 0 ? ql[l] : ql[l + 32]);
  const int low4 = quarter < 2 ? (lo & 0x0f) : (lo >> 4);
  const int q = (low4 | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
  const float d = half_at(b + 208);
  return __fmul_rn(__fmul_rn(d, static_cast<float>(sc[l / 16 + 2 * quarter])), static_cast<float>(q));
}

template <Type kType>
__device__ float element(const std::uint8_t* b, int j) {
  if constexpr (kType == kQ4_0) {
    return __fmul_rn(static_cast<float>(nibble(b + 2, j) - 8), half_at(b));
  } else if constexpr (kType == kQ4_1) {
    return __fadd_rn(__fmul_rn(static_cast<float>(nibble(b + 4, j)), half_at(b)), half_at(b + 2));
  } else if constexpr (kType == kQ5_0) {
    return __fmul_rn(static_cast<float>(q5_value(b + 2, b + 6, j) - 16), half_at(b));
  } else if constexpr (kType == kQ5_1) {
    return __fadd_rn(__fmul_rn(static_cast<float>(q5_value(b + 4, b + 8, j)), half_at(b)), half_at(b + 2));
  } else if constexpr (kType == kQ8_0) {
    return __fmul_rn(static_cast<float>(static_cast<std::int8_t>(b[2 + j])), half_at(b));
  } else if constexpr (kType == kQ4_K) {
    return k_value(false, b, j);
  } else if constexpr (kType == kQ5_K) {
    return k_value(true, b, j);
  } else {
    static_assert(kType == kQ6_K);
    return q6_k_value(b, j);
  }
}

template <Type kType, int kBlockElements, int kBlockBytes>
__global__ void dequantize_kernel(const std::uint8_t* blocks, std::size_t row_bytes, int rows, int cols,
                                  std::uint16_t* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * cols) return;
  const std::size_t r = i / cols;
  const int c = static_cast<int>(i % cols);
  const std::uint8_t* block = blocks + r * row_bytes + static_cast<std::size_t>(c / kBlockElements) * kBlockBytes;
  out[i] = elementwise::bf16_bits(element<kType>(block, c % kBlockElements));
}

__global__ void copy_bf16_rows(const std::uint8_t* blocks, std::size_t row_bytes, int rows, int cols,
                               std::uint16_t* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * cols) return;
  const std::size_t r = i / cols;
  const int c = static_cast<int>(i % cols);
  const std::uint8_t* p = blocks + r * row_bytes + 2 * static_cast<std::size_t>(c);
  out[i] = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

std::invalid_argument bad_shape(std::uint32_t type, std::size_t row_bytes, int rows, int cols) {
  return std::invalid_argument("dequantize_bf16 (cuda): ggml type " + std::to_string(type) + ", " +
                               std::to_string(rows) + " rows of " + std::to_string(cols) + " columns, " +
                               std::to_string(row_bytes) + " bytes a row");
}

template <Type kType, int kBlockElements, int kBlockBytes>
void launch(const void* blocks, std::size_t row_bytes, int rows, int cols, std::uint16_t* out, void* stream) {
  if (cols % kBlockElements != 0 || row_bytes < static_cast<std::size_t>(cols / kBlockElements) * kBlockBytes) {
    throw bad_shape(kType, row_bytes, rows, cols);
  }
  const std::size_t count = static_cast<std::size_t>(rows) * cols;
  dequantize_kernel<kType, kBlockElements, kBlockBytes><<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(
      static_cast<const std::uint8_t*>(blocks), row_bytes, rows, cols, out);
}

}  // namespace

void dequantize_bf16(std::uint32_t ggml_type, const void* blocks, std::size_t row_bytes, int rows, int cols,
                     std::uint16_t* out, void* stream) {
  if (rows < 0 || cols <= 0) throw bad_shape(ggml_type, row_bytes, rows, cols);
  if (rows == 0) return;
  switch (ggml_type) {
    case kQ4_0: launch<kQ4_0, 32, 18>(blocks, row_bytes, rows, cols, out, stream); break;
    case kQ4_1: launch<kQ4_1, 32, 20>(blocks, row_bytes, rows, cols, out, stream); break;
    case kQ5_0: launch<kQ5_0, 32, 22>(blocks, row_bytes, rows, cols, out, stream); break;
    case kQ5_1: launch<kQ5_1, 32, 24>(blocks, row_bytes, rows, cols, out, stream); break;
    case kQ8_0: launch<kQ8_0, 32, 34>(blocks, row_bytes, rows, cols, out, stream); break;
    case kQ4_K: launch<kQ4_K, 256, 144>(blocks, row_bytes, rows, cols, out, stream); break;
    case kQ5_K: launch<kQ5_K, 256, 176>(blocks, row_bytes, rows, cols, out, stream); break;
    case kQ6_K: launch<kQ6_K, 256, 210>(blocks, row_bytes, rows, cols, out, stream); break;
    case kBF16: {
      if (row_bytes < 2 * static_cast<std::size_t>(cols)) throw bad_shape(ggml_type, row_bytes, rows, cols);
      const std::size_t count = static_cast<std::size_t>(rows) * cols;
      copy_bf16_rows<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(
          static_cast<const std::uint8_t*>(blocks), row_bytes, rows, cols, out);
      break;
    }
    default:
      throw std::invalid_argument("dequantize_bf16 (cuda): ggml type " + std::to_string(ggml_type) +
                                  " is not kept in blocks on the device");
  }
  check_launch("dequantize_bf16");
}

}  // namespace midtune::engine::cuda
