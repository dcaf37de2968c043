#include "backends/engine/ops/packed_matrix.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/fp16.hpp"

namespace midtune::engine {

namespace {

constexpr int kBlock = 32;

// One block of one row in packed form before interleaving.
struct RowBlock {
  std::uint8_t u[kBlock] = {};
  std::uint16_t d = 0;
  std::uint16_t m = 0;
};

void store_row_block(PackedMatrix& p, int row, int block, const RowBlock& rb) {
  std::uint8_t* dst = p.at(row / kPackRows, block);
  const int r = row % kPackRows;
  if (p.bits == 4 || p.bits == 5) {
    for (int chunk = 0; chunk < 4; ++chunk) {
      for (int j = 0; j < 4; ++j) {
        const int lo = rb.u[4 * chunk + j], hi = rb.u[16 + 4 * chunk + j];
        dst[chunk * 64 + r * 4 + j] = static_cast<std::uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
        if (p.bits == 5) {
          std::uint8_t& plane = dst[256 + r * 4 + j];
          plane = static_cast<std::uint8_t>(plane | ((lo >> 4) << (2 * chunk)) | ((hi >> 4) << (2 * chunk + 1)));
        }
      }
    }
  } else {
    for (int chunk = 0; chunk < 8; ++chunk) {
      for (int j = 0; j < 4; ++j) dst[chunk * 64 + r * 4 + j] = rb.u[4 * chunk + j];
    }
  }
  auto* scales = reinterpret_cast<std::uint16_t*>(dst + p.quant_bytes());
  scales[r] = rb.d;
  if (p.implied_zero == 0) scales[kPackRows + r] = rb.m;
  std::uint8_t& group_max = p.group_max_u[row / kPackRows];
  group_max = std::max(group_max, *std::max_element(std::begin(rb.u), std::end(rb.u)));
}

std::uint16_t load_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Asymmetric 8-bit requantisation of 32 floats (types without an exact form).
RowBlock requantize(const float* x, int count) {
  RowBlock rb;
  float lo = x[0], hi = x[0];
  for (int i = 1; i < count; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  rb.m = float_to_fp16(lo);
  const float m = fp16_to_float(rb.m);
  rb.d = float_to_fp16((hi - m) / 255.0f);
  const float d = fp16_to_float(rb.d);
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < count; ++i) {
    rb.u[i] = static_cast<std::uint8_t>(std::clamp(std::nearbyint((x[i] - m) * inv), 0.0f, 255.0f));
  }
  return rb;
}

bool is_nibble_type(GgmlType type) {
  return type == GgmlType::Q4_0 || type == GgmlType::Q4_1 || type == GgmlType::Q4_K;
}

bool is_five_bit_type(GgmlType type) {
  return type == GgmlType::Q5_0 || type == GgmlType::Q5_1 || type == GgmlType::Q5_K;
}

// z in w = (q - z) d for the types with a fixed zero point (then m = -z d);
// 0 for those that store m or are requantised.
int fixed_zero_point(GgmlType type) {
  return type == GgmlType::Q8_0 ? 128 : type == GgmlType::Q5_0 ? 16 : type == GgmlType::Q4_0 ? 8 : 0;
}

// m = -z d of such a type's block: a power-of-two multiple of an fp16 value,
// exact in fp16 (and what a compact matrix implies instead of storing it).
std::uint16_t fixed_min(GgmlType type, std::uint16_t d) {
  return float_to_fp16(-static_cast<float>(fixed_zero_point(type)) * fp16_to_float(d));
}

// Packs one part's rows into p starting at packed row `row0`.
void pack_part(PackedMatrix& p, const MatrixPart& part, int row0) {
  const GgmlType type = part.type;
  const std::size_t per_block = block_elements(type);
  if (part.rows <= 0 || p.cols % per_block != 0) {
    throw std::invalid_argument("pack_matrix: " + std::to_string(part.rows) + " x " +
                                std::to_string(p.cols) + " " + ggml_type_info(type).name +
                                " matrix: needs rows > 0 and a row length that is a multiple of " +
                                std::to_string(per_block));
  }
  const int cols = p.cols;
  const std::size_t row_bytes = cols / per_block * block_bytes(type);
  std::vector<float> row(static_cast<std::size_t>(p.blocks) * kBlock);
  for (int r = 0; r < part.rows; ++r) {
    const auto* src = static_cast<const std::uint8_t*>(part.data) + r * row_bytes;
    if (type == GgmlType::Q4_K || type == GgmlType::Q5_K) {
      // The values and sub-block structure are kept (u = q, one block of 32
      // per sub-block); only the sub-block's fp32 scale and min are rounded
      // to fp16 (relative 2^-11: a quarter of the 8-bit requantisation's
      // step on a 4-bit range).
      const std::size_t stride = block_bytes(type);
      for (int super = 0; super < p.cols / 256; ++super) {
        KSubBlock sub[8];
        k_sub_blocks(type, src + super * stride, sub);
        for (int i = 0; i < 8; ++i) {
          RowBlock rb;
          rb.d = float_to_fp16(sub[i].scale);
          rb.m = float_to_fp16(-sub[i].min);
          std::memcpy(rb.u, sub[i].q, kBlock);
          store_row_block(p, row0 + r, super * 8 + i, rb);
        }
      }
    } else if (type == GgmlType::Q5_0 || type == GgmlType::Q5_1) {
      const std::size_t stride = block_bytes(type);
      for (int b = 0; b < p.blocks; ++b) {
        const std::uint8_t* blk = src + b * stride;
        RowBlock rb;
        rb.d = load_u16(blk);
        rb.m = type == GgmlType::Q5_1 ? load_u16(blk + 2) : fixed_min(type, rb.d);
        const std::uint8_t* qh = blk + (type == GgmlType::Q5_1 ? 4 : 2);
        int q[kBlock];
        q5_values(qh, qh + 4, q);
        for (int i = 0; i < kBlock; ++i) rb.u[i] = static_cast<std::uint8_t>(q[i]);
        store_row_block(p, row0 + r, b, rb);
      }
    } else if (type == GgmlType::Q4_1 || type == GgmlType::Q4_0 || type == GgmlType::Q8_0) {
      const std::size_t stride = block_bytes(type);
      for (int b = 0; b < p.blocks; ++b) {
        const std::uint8_t* blk = src + b * stride;
        RowBlock rb;
        rb.d = load_u16(blk);
        if (type == GgmlType::Q8_0) {
          for (int i = 0; i < kBlock; ++i) rb.u[i] = static_cast<std::uint8_t>(blk[2 + i] ^ 0x80u);
          rb.m = fixed_min(type, rb.d);
        } else {
          const std::uint8_t* qs = blk + (type == GgmlType::Q4_1 ? 4 : 2);
          for (int i = 0; i < 16; ++i) {
            rb.u[i] = qs[i] & 0x0f;
            rb.u[i + 16] = qs[i] >> 4;
          }
          rb.m = type == GgmlType::Q4_1 ? load_u16(blk + 2) : fixed_min(type, rb.d);
        }
        store_row_block(p, row0 + r, b, rb);
      }
    } else {
      dequantize_row(type, src, row.data(), static_cast<std::size_t>(cols));
      for (int b = 0; b < p.blocks; ++b) {
        const int count = std::min(kBlock, cols - b * kBlock);
        store_row_block(p, row0 + r, b, requantize(row.data() + b * kBlock, count));
      }
    }
  }
}

}  // namespace

PackedMatrix pack_matrices(const std::vector<MatrixPart>& parts, int cols, PackLayout layout) {
  if (parts.empty() || cols <= 0) throw std::invalid_argument("pack_matrices: nothing to pack");
  PackedMatrix p;
  p.cols = cols;
  bool nibbles = true, five_bits = true, one_type = true;
  for (const MatrixPart& part : parts) {
    p.rows += part.rows;
    nibbles = nibbles && is_nibble_type(part.type);
    five_bits = five_bits && (is_nibble_type(part.type) || is_five_bit_type(part.type));
    one_type = one_type && part.type == parts[0].type;
  }
  const bool compact = layout == PackLayout::compact;
  p.bits = nibbles ? 4 : compact && five_bits ? 5 : 8;
  // One type throughout: Q4_0 packs to bits 4, Q5_0 to 5, Q8_0 to 8 (the
  // pairs the bodies read).
  p.implied_zero = compact && one_type ? fixed_zero_point(parts[0].type) : 0;
  p.blocks = (cols + kBlock - 1) / kBlock;
  p.groups = (p.rows + kPackRows - 1) / kPackRows;
  p.block_stride = p.quant_bytes() + (p.implied_zero != 0 ? 2 : 4) * kPackRows;
  p.data.resize(static_cast<std::size_t>(p.groups) * p.blocks * p.block_stride);
  p.group_max_u.assign(p.groups, 0);  // store_row_block raises them
  int row0 = 0;
  for (const MatrixPart& part : parts) {
    pack_part(p, part, row0);
    row0 += part.rows;
  }
  return p;
}

PackedMatrix pack_matrix(GgmlType type, const void* data, int rows, int cols, PackLayout layout) {
  return pack_matrices({MatrixPart{type, data, rows}}, cols, layout);
}

float packed_weight(const PackedMatrix& m, int row, int col) {
  const std::uint8_t* blk = m.at(row / kPackRows, col / kBlock);
  const int r = row % kPackRows;
  return packed_d(m, blk, r) * static_cast<float>(packed_u(m, blk, r, col % kBlock)) + packed_min(m, blk, r);
}

}  // namespace midtune::engine
