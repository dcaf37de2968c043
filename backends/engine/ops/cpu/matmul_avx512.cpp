// AVX-512 VNNI tile for the packed matmul: one zmm of int32 lanes holds the
// 16 rows of a group; vpdpbusd multiplies 4 unsigned weight bytes per lane by
// 4 activation bytes broadcast to every lane. Up to 8 tokens share each
// unpacked weight block (register tiling). Compiled with AVX-512 flags; only
// called after cpu dispatch says the CPU has them.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine {

namespace {

// acc += u (16 x 4 unsigned bytes) . the 4 signed bytes at p, broadcast to
// every lane. Written in asm because GCC does not fold the broadcast into
// vpdpbusd's memory operand (one uop less per call).
inline __m512i dpbusd_broadcast(__m512i acc, __m512i u, const std::int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const std::int32_t*>(p)));
  return acc;
}

template <int Bits, int M>
void tile_rows(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, float* y,
               std::size_t ldy, __mmask16 store_mask) {
  __m512 acc[M];
  for (int t = 0; t < M; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  constexpr int kSteps = 8;
  for (int b = 0; b < w.blocks; ++b) {
    const std::uint8_t* blk = w.at(group, b);
    if constexpr (M <= 2) {
      // Decode streams the weights once: ask for the block kAhead ahead
      // (prefetches are hints and never fault past the end).
      constexpr int kAhead = 8;
      const char* next = reinterpret_cast<const char*>(blk + kAhead * w.block_stride);
      for (std::size_t line = 0; line < w.block_stride; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
    }
    __m512i u[kSteps];
    if constexpr (Bits == 4) {
      for (int c = 0; c < 4; ++c) {
        const __m512i packed = _mm512_load_si512(blk + c * 64);
        u[c] = _mm512_and_si512(packed, low_nibbles);
        u[c + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibbles);
      }
    } else {
      for (int c = 0; c < kSteps; ++c) u[c] = _mm512_load_si512(blk + c * 64);
    }
    const std::uint8_t* scales = blk + w.quant_bytes();
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales)));
    const __m512 m = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales + 32)));
    // Two int32 chains per token halve the vpdpbusd latency chain; the
    // unrolled token loop keeps every accumulator in a register.
#pragma GCC unroll 8
    for (int t = 0; t < M; ++t) {
      const std::int8_t* a = x.row_q(t0 + t) + b * kQuantBlock;
      __m512i dot0 = dpbusd_broadcast(_mm512_setzero_si512(), u[0], a);
      __m512i dot1 = dpbusd_broadcast(_mm512_setzero_si512(), u[1], a + 4);
#pragma GCC unroll 8
      for (int c = 2; c < kSteps; c += 2) {
        dot0 = dpbusd_broadcast(dot0, u[c], a + 4 * c);
        dot1 = dpbusd_broadcast(dot1, u[c + 1], a + 4 * c + 4);
      }
      const std::size_t qi = static_cast<std::size_t>(t0 + t) * x.blocks + b;
      const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(x.d[qi]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dot0, dot1)), scale, acc[t]);
      acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.s[qi]), acc[t]);
    }
  }
  for (int t = 0; t < M; ++t) {
    _mm512_mask_storeu_ps(y + static_cast<std::size_t>(t0 + t) * ldy + group * kPackRows, store_mask,
                          acc[t]);
  }
}

template <int Bits>
void tile_any(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1, float* y,
              std::size_t ldy) {
  const int rows = w.rows - group * kPackRows < kPackRows ? w.rows - group * kPackRows : kPackRows;
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1u);
  int t = t0;
  for (; t + 8 <= t1; t += 8) tile_rows<Bits, 8>(w, group, x, t, y, ldy, mask);
  switch (t1 - t) {
    case 7: tile_rows<Bits, 7>(w, group, x, t, y, ldy, mask); break;
    case 6: tile_rows<Bits, 6>(w, group, x, t, y, ldy, mask); break;
    case 5: tile_rows<Bits, 5>(w, group, x, t, y, ldy, mask); break;
    case 4: tile_rows<Bits, 4>(w, group, x, t, y, ldy, mask); break;
    case 3: tile_rows<Bits, 3>(w, group, x, t, y, ldy, mask); break;
    case 2: tile_rows<Bits, 2>(w, group, x, t, y, ldy, mask); break;
    case 1: tile_rows<Bits, 1>(w, group, x, t, y, ldy, mask); break;
    default: break;
  }
}

void tile_avx512(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1,
                 float* y, std::size_t ldy) {
  if (w.bits == 4) {
    tile_any<4>(w, group, x, t0, t1, y, ldy);
  } else {
    tile_any<8>(w, group, x, t0, t1, y, ldy);
  }
}

}  // namespace

namespace cpu {
PackedTileFn matmul_tile_avx512vnni() { return &tile_avx512; }
}  // namespace cpu

}  // namespace midtune::engine
