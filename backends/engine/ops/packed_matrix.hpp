// Weights repacked at load for the int8 matmul kernels.
//
// Every supported ggml type is brought to one form: w = d * u + m per block
// of 32 inputs, with u unsigned (4-bit for Q4_0 / Q4_1, 8-bit otherwise), so
// that AVX-512 VNNI's vpdpbusd (u8 x s8) multiplies u by the int8
// activations directly:  Q4_1 -> (d, m) as stored;  Q4_0 -> m = -8 d;
// Q5_1 -> (d, m) as stored, u the 5-bit value;  Q5_0 -> m = -16 d;
// Q8_0 -> u = q + 128, m = -128 d (all exact);  Q4_K / Q5_K -> u = q per
// sub-block of 32, d and m its scale and -min rounded to fp16 (the values
// exact, the two factors within 2^-11).  Every other type (floats, Q2_K,
// Q3_K, Q6_K, IQ4) is dequantised and requantised to 8-bit (asymmetric, per
// block). Each row group records its largest u, so that a kernel whose int16
// sums would overflow on full bytes (AVX2's vpmaddubsw) multiplies such a
// group's bytes directly.
//
// Rows are interleaved 16 at a time (one zmm of int32 lanes = 16 output
// rows). For a group of 16 rows and one block of 32 inputs:
//   4-bit: 4 chunks of 64 bytes; byte r*4+j of chunk L holds u[r][4L+j] in its
//          low nibble and u[r][16+4L+j] in its high nibble (for Q4_1 this is
//          just ggml's qs[4L+j] of row r: the repack interleaves 4-byte runs);
//   8-bit: 8 chunks of 64 bytes; byte r*4+j of chunk L holds u[r][4L+j];
//   then 16 fp16 d and 16 fp16 m.
//
// Two layouts (PackLayout), chosen by the body that will read the matrix
// (packed_layout_for in matmul.hpp):
//   bytes:   5-bit values one per byte, as 8-bit ones; every body reads it.
//   compact: what a memory-bound decode wants (one token reads every weight
//            once, so bytes are time): a matrix of 4- and 5-bit parts keeps
//            5-bit values as the 4-bit layout plus a plane of fifth bits,
//            64 bytes after the nibbles, whose byte r*4+j holds in bit 2L
//            the fifth bit of u[r][4L+j] and in bit 2L+1 that of
//            u[r][16+4L+j] (0.75 bytes a weight instead of 1.125); and a
//            matrix whose parts are all of one type with a fixed zero
//            point stores no m, since m = -z d (implied_zero z: Q8_0 128,
//            Q5_0 16, Q4_0 8): Q8_0 1.0625 bytes a weight (its own size)
//            instead of 1.125, Q5_0 0.6875 (its own) instead of 0.75, Q4_0
//            0.5625 (its own) instead of 0.625.
//            The values and factors are the bytes layout's exactly, so
//            either layout gives the same products. The scalar and AVX2
//            bodies read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/ops/aligned_buffer.hpp"
#include "backends/engine/ops/fp16.hpp"

namespace midtune::engine {

inline constexpr int kPackRows = 16;

enum class PackLayout { bytes, compact };

struct PackedMatrix {
  int rows = 0;    // outputs N
  int cols = 0;    // inputs K
  int blocks = 0;  // ceil(K / 32)
  int groups = 0;  // ceil(N / 16)
  int bits = 4;    // 4, 8, or 5 (compact layout only: nibbles + fifth-bit plane)
  // Compact layout only: m = -implied_zero * d, not stored (128: every part
  // Q8_0, bits 8; 16: Q5_0, bits 5; 8: Q4_0, bits 4); 0: m stored.
  int implied_zero = 0;
  std::size_t block_stride = 0;  // bytes per (group, block)
  AlignedBuffer<std::uint8_t> data;
  std::vector<std::uint8_t> group_max_u;  // per group: the largest u it holds

  // True when every u of the group fits in 5 bits (Q5_0 / Q5_1 / Q5_K, or
  // 4-bit weights).
  bool narrow(int group) const { return group_max_u[group] <= 31; }

  // True when the compact layout differs here from the bytes one (fifth-bit
  // planes or no stored m), so only a compact reader may multiply it.
  bool compact_only() const { return bits == 5 || implied_zero != 0; }

  // Bytes of u per (group, block); the 16 fp16 d follow, then (unless
  // implied_zero) the 16 fp16 m.
  std::size_t quant_bytes() const { return bits == 4 ? 256 : bits == 5 ? 320 : 512; }
  const std::uint8_t* at(int group, int block) const {
    return data.data() + (static_cast<std::size_t>(group) * blocks + block) * block_stride;
  }
  std::uint8_t* at(int group, int block) {
    return data.data() + (static_cast<std::size_t>(group) * blocks + block) * block_stride;
  }
};

// One ggml matrix to pack: `rows` rows of the shared column count.
struct MatrixPart {
  GgmlType type;
  const void* data;
  int rows;
};

// Packs several matrices with the same column count one below the other
// (Q, K and V as one matmul; gate and up as another). The result is 4-bit
// only when every part is Q4_0 / Q4_1 / Q4_K, 5-bit (compact layout only) when
// every part is one of those or Q5_0 / Q5_1 / Q5_K; a row group is narrow when all its
// rows come from 4- or 5-bit parts. Throws std::invalid_argument when
// cols is not a multiple of a part's block size.
PackedMatrix pack_matrices(const std::vector<MatrixPart>& parts, int cols,
                           PackLayout layout = PackLayout::bytes);

// Packs a row-major ggml matrix of `rows` rows of `cols` elements (ggml's
// dims[1] x dims[0]). Throws std::invalid_argument when cols is not a multiple
// of the type's block size.
PackedMatrix pack_matrix(GgmlType type, const void* data, int rows, int cols,
                         PackLayout layout = PackLayout::bytes);

// u of row r (in its group) and input k (in the block) of one packed block,
// for any bits and layout (the scalar body and the tests read it).
inline int packed_u(const PackedMatrix& m, const std::uint8_t* blk, int r, int k) {
  if (m.bits == 8) return blk[(k / 4) * 64 + r * 4 + k % 4];
  const std::uint8_t byte = blk[((k % 16) / 4) * 64 + r * 4 + k % 4];
  const int nibble = k < 16 ? (byte & 0x0f) : (byte >> 4);
  if (m.bits == 4) return nibble;
  const int plane_bit = 2 * ((k % 16) / 4) + (k < 16 ? 0 : 1);
  return nibble | (((blk[256 + r * 4 + k % 4] >> plane_bit) & 1) << 4);
}

// d and m of row r of one packed block.
inline float packed_d(const PackedMatrix& m, const std::uint8_t* blk, int r) {
  std::uint16_t h;
  std::memcpy(&h, blk + m.quant_bytes() + 2 * r, sizeof h);
  return fp16_to_float(h);
}
inline float packed_min(const PackedMatrix& m, const std::uint8_t* blk, int r) {
  // A power-of-two multiple of an fp16 value: exactly what the bytes layout
  // stores.
  if (m.implied_zero != 0) return -static_cast<float>(m.implied_zero) * packed_d(m, blk, r);
  std::uint16_t h;
  std::memcpy(&h, blk + m.quant_bytes() + 2 * (kPackRows + r), sizeof h);
  return fp16_to_float(h);
}

// One weight of the packed matrix as a float (tests and debugging).
float packed_weight(const PackedMatrix& m, int row, int col);

}  // namespace midtune::engine
