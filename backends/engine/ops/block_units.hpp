// The ggml blocks the GPU's `file` weight form keeps (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; layouts as in ggml-common.h), read in units
// of 8 weights: the unit one GPU thread dequantises in registers. A unit is
// 4 consecutive weights at element `first` of its block and 4 at
// `first + gap`, the weights that one 4-byte word of the block's quants
// holds (low and high nibbles; Q8_0: 8 bytes, gap 4), so that the 32 lanes
// of a warp reading 32 neighbouring units read neighbouring bytes.
//
// Every weight is dequant_cpu.cpp's value bit for bit: the same float
// operations in the same order, each rounded (no FMA contraction on the
// device: __fmul_rn / __fadd_rn / __fsub_rn). Host and device compile this
// one code (tests/engine/block_gemv_test.cpp checks every unit of every
// type against dequantize_row here), so the CUDA kernels that read blocks
// (dequant_cuda.cu, block_gemv_cuda.cu) run host-tested arithmetic.
// C++17, without the GGUF reader: the type is its ggml id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/engine/ops/elementwise.hpp"  // MIDTUNE_HOST_DEVICE

#include "backends/engine/ops/fp16.hpp"  // the host pass's half

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace midtune::engine::blocks {

// ggml's type ids (GgmlType's values).
enum Type : std::uint32_t {
  kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14
};

constexpr int kUnitWeights = 8;

template <std::uint32_t kType>
struct Shape;
template <> struct Shape<kQ4_0> { static constexpr int kElements = 32, kBytes = 18; };
template <> struct Shape<kQ4_1> { static constexpr int kElements = 32, kBytes = 20; };
template <> struct Shape<kQ5_0> { static constexpr int kElements = 32, kBytes = 22; };
template <> struct Shape<kQ5_1> { static constexpr int kElements = 32, kBytes = 24; };
template <> struct Shape<kQ8_0> { static constexpr int kElements = 32, kBytes = 34; };
template <> struct Shape<kQ4_K> { static constexpr int kElements = 256, kBytes = 144; };
template <> struct Shape<kQ5_K> { static constexpr int kElements = 256, kBytes = 176; };
template <> struct Shape<kQ6_K> { static constexpr int kElements = 256, kBytes = 210; };

template <std::uint32_t kType>
constexpr int kUnits = Shape<kType>::kElements / kUnitWeights;

// Calls f(std::integral_constant-like tag) with the block type `type`;
// false (f not called) for a type that is not one of the above.
template <std::uint32_t kType>
struct TypeTag {
  static constexpr std::uint32_t value = kType;
};
template <typename F>
bool with_block_type(std::uint32_t type, F&& f) {
  switch (type) {
    case kQ4_0: f(TypeTag<kQ4_0>{}); return true;
    case kQ4_1: f(TypeTag<kQ4_1>{}); return true;
    case kQ5_0: f(TypeTag<kQ5_0>{}); return true;
    case kQ5_1: f(TypeTag<kQ5_1>{}); return true;
    case kQ8_0: f(TypeTag<kQ8_0>{}); return true;
    case kQ4_K: f(TypeTag<kQ4_K>{}); return true;
    case kQ5_K: f(TypeTag<kQ5_K>{}); return true;
    case kQ6_K: f(TypeTag<kQ6_K>{}); return true;
    default: return false;
  }
}

// Every field this file reads sits at an even offset of its block and
// every block size is even, so the device reads 16-bit words (blocks are
// only 2-byte aligned: a Q4_0 block is 18 bytes).
MIDTUNE_HOST_DEVICE inline std::uint32_t u16_at(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const std::uint16_t*>(p);
#else
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}
MIDTUNE_HOST_DEVICE inline std::uint32_t u32_at(const std::uint8_t* p) { return u16_at(p) | (u16_at(p + 2) << 16); }

MIDTUNE_HOST_DEVICE inline float half_at(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(u16_at(p))));
#else
  return fp16_to_float(static_cast<std::uint16_t>(u16_at(p)));
#endif
}

// Rounded float operations, never contracted into an FMA (the host's
// dequantisation rounds each).
MIDTUNE_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MIDTUNE_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MIDTUNE_HOST_DEVICE inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// Byte k (0..3) of a little-endian word.
MIDTUNE_HOST_DEVICE inline int byte_of(std::uint32_t word, int k) { return static_cast<int>((word >> (8 * k)) & 0xff); }

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j of 8, packed in 12
// bytes (ggml's get_scale_min_k4).
MIDTUNE_HOST_DEVICE inline void k_scale_min(const std::uint8_t* scales, int j, int& sc, int& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Unit u (0 .. kUnits - 1) of `block`: w[0..3] are elements first..first+3
// of the block, w[4..7] elements first+gap..first+gap+3.
template <std::uint32_t kType>
MIDTUNE_HOST_DEVICE inline void unit_weights(const std::uint8_t* b, int u, float* w, int& first, int& gap) {
  if constexpr (kType == kQ4_0 || kType == kQ4_1 || kType == kQ5_0 || kType == kQ5_1) {
    // Element j < 16 is the low nibble of qs[j], element 16 + j the high one;
    // the 5-bit types' 5th bit of element j is bit j of qh.
    constexpr bool kMin = kType == kQ4_1 || kType == kQ5_1;
    constexpr bool kFive = kType == kQ5_0 || kType == kQ5_1;
    constexpr int kQs = (kMin ? 4 : 2) + (kFive ? 4 : 0);
    const float d = half_at(b);
    const std::uint32_t qs = u32_at(b + kQs + 4 * u);
    std::uint32_t qh = 0;
    if constexpr (kFive) qh = u32_at(b + (kMin ? 4 : 2));
    first = 4 * u;
    gap = 16;
    for (int k = 0; k < 4; ++k) {
      int lo = byte_of(qs, k) & 0x0f, hi = byte_of(qs, k) >> 4;
      if constexpr (kFive) {
        lo |= static_cast<int>(((qh >> (first + k)) & 1) << 4);
        hi |= static_cast<int>(((qh >> (first + k + 16)) & 1) << 4);
      }
      if constexpr (kMin) {
        const float m = half_at(b + 2);
        w[k] = add(mul(static_cast<float>(lo), d), m);
        w[k + 4] = add(mul(static_cast<float>(hi), d), m);
      } else {
        constexpr int kOffset = kFive ? 16 : 8;
        w[k] = mul(static_cast<float>(lo - kOffset), d);
        w[k + 4] = mul(static_cast<float>(hi - kOffset), d);
      }
    }
  } else if constexpr (kType == kQ8_0) {
    const float d = half_at(b);
    const std::uint32_t lo = u32_at(b + 2 + 8 * u), hi = u32_at(b + 6 + 8 * u);
    first = 8 * u;
    gap = 4;
    for (int k = 0; k < 4; ++k) {
      w[k] = mul(static_cast<float>(static_cast<std::int8_t>(byte_of(lo, k))), d);
      w[k + 4] = mul(static_cast<float>(static_cast<std::int8_t>(byte_of(hi, k))), d);
    }
  } else if constexpr (kType == kQ4_K || kType == kQ5_K) {
    // Sub-blocks 2i and 2i+1 (32 weights each) share 32 bytes of qs: low
    // nibbles, then high; x = (d * sc) * q - dmin * m. Q5_K's 5th bits are
    // bits 2i and 2i+1 of qh[l].
    constexpr bool kFive = kType == kQ5_K;
    const int i = u / 8, l = 4 * (u % 8);
    const float d = half_at(b), dmin = half_at(b + 2);
    int sc0, m0, sc1, m1;
    k_scale_min(b + 4, 2 * i, sc0, m0);
    k_scale_min(b + 4, 2 * i + 1, sc1, m1);
    const float scale0 = mul(d, static_cast<float>(sc0)), min0 = mul(dmin, static_cast<float>(m0));
    const float scale1 = mul(d, static_cast<float>(sc1)), min1 = mul(dmin, static_cast<float>(m1));
    const std::uint32_t qs = u32_at(b + (kFive ? 48 : 16) + 32 * i + l);
    std::uint32_t qh = 0;
    if constexpr (kFive) qh = u32_at(b + 16 + l);
    first = 64 * i + l;
    gap = 32;
    for (int k = 0; k < 4; ++k) {
      int lo = byte_of(qs, k) & 0x0f, hi = byte_of(qs, k) >> 4;
      if constexpr (kFive) {
        lo += ((byte_of(qh, k) >> (2 * i)) & 1) << 4;
        hi += ((byte_of(qh, k) >> (2 * i + 1)) & 1) << 4;
      }
      w[k] = sub(mul(scale0, static_cast<float>(lo)), min0);
      w[k + 4] = sub(mul(scale1, static_cast<float>(hi)), min1);
    }
  } else {
    static_assert(kType == kQ6_K);
    // Two halves of 128; in half n, ql[64n + l] (l < 64) holds the low 4
    // bits of element 128n + l (low nibble) and of 128n + 64 + l (high),
    // qh[32n + l % 32] their top 2 bits (bits 2 * quarter), quarters of 32
    // elements; x = (d * sc[8n + (element % 128) / 16]) * (q - 32).
    const int n = u / 16, l = 4 * (u % 16);
    const int quarter = l / 32;  // of the low nibbles; the high ones' is quarter + 2
    const std::uint32_t ql = u32_at(b + 64 * n + l);
    const std::uint32_t qh = u32_at(b + 128 + 32 * n + l % 32);
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192 + 8 * n);
    const float d = half_at(b + 208);
    const float scale_lo = mul(d, static_cast<float>(sc[l / 16]));
    const float scale_hi = mul(d, static_cast<float>(sc[l / 16 + 4]));
    first = 128 * n + l;
    gap = 64;
    for (int k = 0; k < 4; ++k) {
      const int lo = ((byte_of(ql, k) & 0x0f) | (((byte_of(qh, k) >> (2 * quarter)) & 3) << 4)) - 32;
      const int hi = ((byte_of(ql, k) >> 4) | (((byte_of(qh, k) >> (2 * quarter + 4)) & 3) << 4)) - 32;
      w[k] = mul(scale_lo, static_cast<float>(lo));
      w[k + 4] = mul(scale_hi, static_cast<float>(hi));
    }
  }
}

}  // namespace midtune::engine::blocks
