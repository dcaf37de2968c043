// AVX2 tile for the packed matmul (machines without AVX-512 VNNI): each
// 16-row group is two halves of 8 int32 lanes; vpmaddubsw multiplies the
// unsigned weight bytes by the activation bytes into int16 pairs, which never
// saturate because every operand u is at most 15 (8-bit weights are split
// into two nibbles: u = 16 hi + lo).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine {

namespace {

inline __m256i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// Sum over the 8 steps of u[step] x a[step] for one half (8 rows); every u
// byte <= 15, so int16 pair sums stay below 2 * 15 * 128.
inline __m256i dot_nibbles(const __m256i* u, const std::int8_t* a) {
  __m256i sum16 = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(u[c], broadcast4(a + 4 * c)));
  return _mm256_madd_epi16(sum16, _mm256_set1_epi16(1));
}

template <int Bits>
void tile_avx2(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1, float* y,
               std::size_t ldy) {
  const int rows = w.rows - group * kPackRows < kPackRows ? w.rows - group * kPackRows : kPackRows;
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  for (int t = t0; t < t1; ++t) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < w.blocks; ++b) {
      const std::uint8_t* blk = w.at(group, b);
      const std::int8_t* a = x.row_q(t) + b * kQuantBlock;
      const std::uint8_t* scales = blk + w.quant_bytes();
      const std::size_t qi = static_cast<std::size_t>(t) * x.blocks + b;
      for (int half = 0; half < 2; ++half) {
        __m256i dot;
        if constexpr (Bits == 4) {
          __m256i u[8];
          for (int c = 0; c < 4; ++c) {
            const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + c * 64 + half * 32));
            u[c] = _mm256_and_si256(packed, low_nibbles);
            u[c + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
          }
          dot = dot_nibbles(u, a);
        } else {
          __m256i lo[8], hi[8];
          for (int c = 0; c < 8; ++c) {
            const __m256i bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + c * 64 + half * 32));
            lo[c] = _mm256_and_si256(bytes, low_nibbles);
            hi[c] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_nibbles);
          }
          dot = _mm256_add_epi32(dot_nibbles(lo, a), _mm256_slli_epi32(dot_nibbles(hi, a), 4));
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + half * 16)));
        const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 32 + half * 16)));
        acc[half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(x.d[qi])), acc[half]);
        acc[half] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.s[qi]), acc[half]);
      }
    }
    alignas(32) float out[kPackRows];
    _mm256_store_ps(out, acc[0]);
    _mm256_store_ps(out + 8, acc[1]);
    float* dst = y + static_cast<std::size_t>(t) * ldy + group * kPackRows;
    for (int r = 0; r < rows; ++r) dst[r] = out[r];
  }
}

void tile(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1, float* y,
          std::size_t ldy) {
  if (w.bits == 4) {
    tile_avx2<4>(w, group, x, t0, t1, y, ldy);
  } else {
    tile_avx2<8>(w, group, x, t0, t1, y, ldy);
  }
}

}  // namespace

namespace cpu {
PackedTileFn matmul_tile_avx2() { return &tile; }
}  // namespace cpu

}  // namespace midtune::engine
