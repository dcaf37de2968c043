#include "backends/engine/ops/dequant.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/fp16.hpp"

namespace midtune::engine {

// The low 4 bits of element j are nibble j of qs (low nibbles first), its
// 5th bit is bit j of the 32-bit qh.
void q5_values(const std::uint8_t* qh_bytes, const std::uint8_t* qs, int* q) {
  std::uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof qh);
  for (std::size_t j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) << 4) & 0x10);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10);
  }
}

namespace {

// Q4_K / Q5_K: 6-bit scale and min j of 8, packed in 12 bytes (ggml's
// get_scale_min_k4).
void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t& scale, std::uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace

void k_sub_blocks(GgmlType type, const std::uint8_t* block, KSubBlock* out) {
  if (type != GgmlType::Q4_K && type != GgmlType::Q5_K) {
    throw std::invalid_argument(std::string("k_sub_blocks: ") + ggml_type_info(type).name + " is not Q4_K / Q5_K");
  }
  std::uint16_t d16, dmin16;
  std::memcpy(&d16, block, sizeof d16);
  std::memcpy(&dmin16, block + 2, sizeof dmin16);
  const float d = fp16_to_float(d16);
  const float dmin = fp16_to_float(dmin16);
  const std::uint8_t* scales = block + 4;
  const std::uint8_t* qh = type == GgmlType::Q5_K ? block + 16 : nullptr;
  const std::uint8_t* q = block + (type == GgmlType::Q5_K ? 48 : 16);
  // Sub-blocks 2i and 2i+1 share 32 bytes of qs: low nibbles, then high;
  // their 5th bits are bits 2i and 2i+1 of qh.
  for (int i = 0; i < 4; ++i, q += 32) {
    for (int half = 0; half < 2; ++half) {
      KSubBlock& sb = out[2 * i + half];
      std::uint8_t sc, m;
      scale_min_k4(2 * i + half, scales, sc, m);
      sb.scale = d * sc;
      sb.min = dmin * m;
      const int bit = 2 * i + half;
      for (int l = 0; l < 32; ++l) {
        const int nibble = half == 0 ? (q[l] & 0x0f) : (q[l] >> 4);
        sb.q[l] = static_cast<std::uint8_t>(nibble + (qh && ((qh[l] >> bit) & 1) ? 16 : 0));
      }
    }
  }
}

namespace {

constexpr std::size_t kQK = 32;    // elements per Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL block
constexpr std::size_t kQKK = 256;  // elements per k-quant super-block

std::uint16_t load_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// block_q4_0 { half d; u8 qs[16]; }: x = (q - 8) * d, low nibbles first.
void dequant_q4_0(const std::uint8_t* b, float* y) {
  const float d = fp16_to_float(load_u16(b));
  const std::uint8_t* qs = b + 2;
  for (std::size_t i = 0; i < kQK / 2; ++i) {
    y[i] = (static_cast<int>(qs[i] & 0x0f) - 8) * d;
    y[i + kQK / 2] = (static_cast<int>(qs[i] >> 4) - 8) * d;
  }
}

// block_q4_1 { half d; half m; u8 qs[16]; }: x = q * d + m.
void dequant_q4_1(const std::uint8_t* b, float* y) {
  const float d = fp16_to_float(load_u16(b));
  const float m = fp16_to_float(load_u16(b + 2));
  const std::uint8_t* qs = b + 4;
  for (std::size_t i = 0; i < kQK / 2; ++i) {
    y[i] = (qs[i] & 0x0f) * d + m;
    y[i + kQK / 2] = (qs[i] >> 4) * d + m;
  }
}

// block_q8_0 { half d; i8 qs[32]; }: x = q * d.
void dequant_q8_0(const std::uint8_t* b, float* y) {
  const float d = fp16_to_float(load_u16(b));
  for (std::size_t i = 0; i < kQK; ++i) y[i] = static_cast<std::int8_t>(b[2 + i]) * d;
}

// Q4_K and Q5_K: eight sub-blocks of 32, x = scale * q - min.
void dequant_k_sub_blocks(GgmlType type, const std::uint8_t* b, float* y) {
  KSubBlock sub[8];
  k_sub_blocks(type, b, sub);
  for (const KSubBlock& sb : sub) {
    for (int l = 0; l < 32; ++l) *y++ = sb.scale * static_cast<float>(sb.q[l]) - sb.min;
  }
}

// block_q4_K { half d; half dmin; u8 scales[12]; u8 qs[128]; }.
void dequant_q4_k(const std::uint8_t* b, float* y) { dequant_k_sub_blocks(GgmlType::Q4_K, b, y); }

// block_q5_K { half d; half dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }.
void dequant_q5_k(const std::uint8_t* b, float* y) { dequant_k_sub_blocks(GgmlType::Q5_K, b, y); }

// block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; half d; }.
void dequant_q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = fp16_to_float(load_u16(b + 208));
  for (std::size_t n = 0; n < kQKK; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// block_q5_0 { half d; u8 qh[4]; u8 qs[16]; }: x = (q - 16) * d.
void dequant_q5_0(const std::uint8_t* b, float* y) {
  const float d = fp16_to_float(load_u16(b));
  int q[kQK];
  q5_values(b + 2, b + 6, q);
  for (std::size_t j = 0; j < kQK; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
}

// block_q5_1 { half d; half m; u8 qh[4]; u8 qs[16]; }: x = q * d + m.
void dequant_q5_1(const std::uint8_t* b, float* y) {
  const float d = fp16_to_float(load_u16(b));
  const float m = fp16_to_float(load_u16(b + 2));
  int q[kQK];
  q5_values(b + 4, b + 8, q);
  for (std::size_t j = 0; j < kQK; ++j) y[j] = static_cast<float>(q[j]) * d + m;
}

// block_q2_K { u8 scales[16]; u8 qs[64]; half d; half dmin; }: 16 sub-blocks
// of 16, each with a 4-bit scale and 4-bit min; 2-bit values.
void dequant_q2_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* scales = b;
  const std::uint8_t* q = b + 16;
  const float d = fp16_to_float(load_u16(b + 80));
  const float dmin = fp16_to_float(load_u16(b + 82));
  int is = 0;
  for (std::size_t n = 0; n < kQKK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const std::uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0x0f);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
      shift += 2;
    }
    q += 32;
  }
}

// block_q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; half d; }: 16 signed
// 6-bit scales packed in 12 bytes; 2-bit values with a high bit in hmask
// (clear = subtract 4).
void dequant_q3_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* hm = b;
  const std::uint8_t* q = b + 32;
  const float d_all = fp16_to_float(load_u16(b + 108));
  std::uint32_t aux[4];
  std::memcpy(aux, b + 96, 12);
  constexpr std::uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  const std::uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::int8_t scales[16];
  std::memcpy(scales, aux, sizeof scales);
  int is = 0;
  std::uint8_t m = 1;
  for (std::size_t n = 0; n < kQKK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          const int k = l + 16 * half;
          *y++ = dl * static_cast<float>(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
        }
      }
      shift += 2;
      m = static_cast<std::uint8_t>(m << 1);
    }
    q += 32;
  }
}

// IQ4's non-linear codebook (kvalues_iq4nl).
constexpr std::int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// block_iq4_nl { half d; u8 qs[16]; }: x = d * codebook[nibble].
void dequant_iq4_nl(const std::uint8_t* b, float* y) {
  const float d = fp16_to_float(load_u16(b));
  const std::uint8_t* qs = b + 2;
  for (std::size_t j = 0; j < kQK / 2; ++j) {
    y[j] = d * kIq4Values[qs[j] & 0x0f];
    y[j + kQK / 2] = d * kIq4Values[qs[j] >> 4];
  }
}

// block_iq4_xs { half d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }: eight
// sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l, high 2 in scales_h).
void dequant_iq4_xs(const std::uint8_t* b, float* y) {
  const float d = fp16_to_float(load_u16(b));
  const std::uint16_t scales_h = load_u16(b + 2);
  const std::uint8_t* scales_l = b + 4;
  const std::uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * kIq4Values[qs[j] & 0x0f];
      y[j + 16] = dl * kIq4Values[qs[j] >> 4];
    }
    y += 32;
    qs += 16;
  }
}

}  // namespace

std::size_t block_elements(GgmlType type) { return ggml_type_info(type).block_elems; }
std::size_t block_bytes(GgmlType type) { return ggml_type_info(type).block_bytes; }

void dequantize_row(GgmlType type, const void* src, float* dst, std::size_t count) {
  const std::size_t per_block = block_elements(type);
  if (count % per_block != 0) {
    throw std::invalid_argument("dequantize_row: " + std::to_string(count) +
                                " elements is not a multiple of the " +
                                ggml_type_info(type).name + " block size " +
                                std::to_string(per_block));
  }
  const auto* in = static_cast<const std::uint8_t*>(src);
  const std::size_t blocks = count / per_block;
  const std::size_t stride = block_bytes(type);
  for (std::size_t i = 0; i < blocks; ++i, in += stride, dst += per_block) {
    switch (type) {
      case GgmlType::F32: std::memcpy(dst, in, sizeof(float)); break;
      case GgmlType::F16: *dst = fp16_to_float(load_u16(in)); break;
      case GgmlType::BF16: *dst = bf16_to_float(load_u16(in)); break;
      case GgmlType::Q4_0: dequant_q4_0(in, dst); break;
      case GgmlType::Q4_1: dequant_q4_1(in, dst); break;
      case GgmlType::Q8_0: dequant_q8_0(in, dst); break;
      case GgmlType::Q5_0: dequant_q5_0(in, dst); break;
      case GgmlType::Q5_1: dequant_q5_1(in, dst); break;
      case GgmlType::Q2_K: dequant_q2_k(in, dst); break;
      case GgmlType::Q3_K: dequant_q3_k(in, dst); break;
      case GgmlType::Q4_K: dequant_q4_k(in, dst); break;
      case GgmlType::Q5_K: dequant_q5_k(in, dst); break;
      case GgmlType::Q6_K: dequant_q6_k(in, dst); break;
      case GgmlType::IQ4_NL: dequant_iq4_nl(in, dst); break;
      case GgmlType::IQ4_XS: dequant_iq4_xs(in, dst); break;
    }
  }
}

}  // namespace midtune::engine
