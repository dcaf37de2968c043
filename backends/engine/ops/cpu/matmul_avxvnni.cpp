// AVX-VNNI tile for the packed matmul (AVX2 CPUs with vpdpbusd on 256-bit
// registers and no AVX-512: Intel's client cores from Alder Lake on, its
// E-core Xeons). vpdpbusd multiplies 4 unsigned weight bytes by 4 signed
// activation bytes and adds the sum to an int32 lane, exactly and without
// int16 pair sums, so the 8-bit weights AVX2 has to split into nibbles
// (matmul_avx2.cpp) go in whole: one instruction per 4-byte step for every
// width, where AVX2 takes four for 8-bit weights. The layout, the register
// tiling over tokens and the per-block scaling are AVX2's.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/cpu/token_tiles.hpp"

namespace midtune::engine {

namespace {

inline __m256i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// acc += (d * xd) * dot + m * xs for one block of one 8-row half.
inline __m256 scale_block(__m256 acc, __m256i dot, const std::uint8_t* scales, int half, float xd, float xs) {
  const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(scales + half * 16)));
  const __m256 m = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(scales + 32 + half * 16)));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(xd)), acc);
  return _mm256_fmadd_ps(m, _mm256_set1_ps(xs), acc);
}

inline void store_lanes(float* dst, __m256 v, int lanes) {
  if (lanes == 8) {
    _mm256_storeu_ps(dst, v);
    return;
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, v);
  for (int r = 0; r < lanes; ++r) dst[r] = out[r];
}

// One block's integer dot products of one 8-row half for M tokens.
// 4-bit: chunk c holds k = 4c..4c+3 in its low nibbles and 16+4c.. in its
// high ones; 8-bit: chunk c holds k = 4c..4c+3 in whole bytes.
template <int Bits, int M>
inline void block_dots(const std::uint8_t* quants, const std::int8_t* const* a, int b, __m256i* dot) {
  for (int t = 0; t < M; ++t) dot[t] = _mm256_setzero_si256();
  if constexpr (Bits == 4) {
    const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
    for (int c = 0; c < 4; ++c) {
      const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(quants + c * 64));
      const __m256i lo = _mm256_and_si256(packed, low_nibbles);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
      for (int t = 0; t < M; ++t) {
        const std::int8_t* at = a[t] + b * kQuantBlock + 4 * c;
        dot[t] = _mm256_dpbusd_avx_epi32(dot[t], lo, broadcast4(at));
        dot[t] = _mm256_dpbusd_avx_epi32(dot[t], hi, broadcast4(at + 16));
      }
    }
  } else {
    for (int c = 0; c < 8; ++c) {
      const __m256i bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(quants + c * 64));
      for (int t = 0; t < M; ++t)
        dot[t] = _mm256_dpbusd_avx_epi32(dot[t], bytes, broadcast4(a[t] + b * kQuantBlock + 4 * c));
    }
  }
}

// Rows [8 half, 8 half + 8) of `group` for tokens [t0, t0 + M); `lanes` of
// the 8 outputs exist (a partial last group).
template <int Bits, int M>
void half_tile(const PackedMatrix& w, int group, int half, const QuantizedRows& x, int t0, float* y,
               std::size_t ldy, int lanes) {
  const std::int8_t* a[M];
  __m256 acc[M];
  for (int t = 0; t < M; ++t) {
    a[t] = x.row_q(t0 + t);
    acc[t] = _mm256_setzero_ps();
  }
  for (int b = 0; b < w.blocks; ++b) {
    const std::uint8_t* blk = w.at(group, b);
    __m256i dot[M];
    block_dots<Bits, M>(blk + half * 32, a, b, dot);
    for (int t = 0; t < M; ++t)
      acc[t] = scale_block(acc[t], dot[t], blk + w.quant_bytes(), half, x.row_d(t0 + t)[b], x.row_s(t0 + t)[b]);
  }
  for (int t = 0; t < M; ++t)
    store_lanes(y + static_cast<std::size_t>(t0 + t) * ldy + group * kPackRows + half * 8, acc[t], lanes);
}

template <int Bits>
void tile_vnni(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1, float* y, std::size_t ldy) {
  const int rows = w.rows - group * kPackRows < kPackRows ? w.rows - group * kPackRows : kPackRows;
  // 6 tokens: their int32 and float accumulators, the weights and the
  // broadcast activations fit the 16 ymm registers; fewer tokens share each
  // weight vector less, more spill (8 ran no faster than 6).
  constexpr int kTile = 6;
  cpu::for_half_token_tiles<kTile>(rows, t0, t1, [&]<int M>(int half, int t, int lanes) {
    half_tile<Bits, M>(w, group, half, x, t, y, ldy, lanes);
  });
}

void tile(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1, float* y, std::size_t ldy) {
  if (w.bits == 4) {
    tile_vnni<4>(w, group, x, t0, t1, y, ldy);
  } else {
    tile_vnni<8>(w, group, x, t0, t1, y, ldy);
  }
}

}  // namespace

namespace cpu {
PackedTileFn matmul_tile_avxvnni() { return &tile; }
}  // namespace cpu

}  // namespace midtune::engine
