#include "backends/engine/ops/dequant.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/fp16.hpp"

namespace midtune::engine {

namespace {

constexpr std::size_t kQK = 32;    // elements per Q4_0 / Q4_1 / Q8_0 block
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

// Q4_K: 6-bit scale and min j of 8, packed in 12 bytes (get_scale_min_k4).
void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t& scale, std::uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// block_q4_K { half d; half dmin; u8 scales[12]; u8 qs[128]; }.
void dequant_q4_k(const std::uint8_t* b, float* y) {
  const float d = fp16_to_float(load_u16(b));
  const float dmin = fp16_to_float(load_u16(b + 2));
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* q = b + 16;
  int is = 0;
  for (std::size_t j = 0; j < kQKK; j += 64) {
    std::uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

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
      case GgmlType::Q4_K: dequant_q4_k(in, dst); break;
      case GgmlType::Q6_K: dequant_q6_k(in, dst); break;
    }
  }
}

}  // namespace midtune::engine
