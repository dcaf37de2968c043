// AVX2 tile for the packed matmul (machines without AVX-512 VNNI): each
// 16-row group is two halves of 8 int32 lanes, 4 weight bytes per lane as
// packed; vpmaddubsw multiplies the unsigned weight bytes by 4 activation
// bytes broadcast to every lane, into int16 pair sums, which must stay below
// 32768 to be exact:
//  - 4-bit weights (u <= 15) take the activation bytes whole: a pair is at
//    most 2 x 15 x 128, the 8 steps of a block summed in int16 8 x 3840;
//  - narrow groups (every u <= 31: Q5_0, Q5_1, Q5_K) too, widening the int16
//    sums every 4 steps (4 x 2 x 31 x 128 < 32768);
//  - full bytes (Q8_0 and the requantised types, u up to 255) would overflow
//    a pair (2 x 255 x 127). Token tiles split the weights into nibbles,
//    u = 16 hi + lo, summed apart and joined by vpmaddwd with 1 and 16; one
//    token (decode) instead multiplies the whole bytes by the activations'
//    balanced base-16 digits (q = 16 hi + lo, |lo|, |hi| <= 8, made once per
//    row by add_digits: a pair is at most 2 x 255 x 8, a block's 8 steps
//    8 x 4080), which saves the per-step unpacking that one token cannot
//    share. In tiles, where 4 tokens already share the unpacking, digits
//    save nothing and making them costs a pass over every activation row.
//  Either way the int32 dot is the same exact sum of u q.
//  - compact 5-bit weights (nibbles + a plane of fifth bits,
//    packed_matrix.hpp) are joined in registers by one token (decode reads
//    0.75 bytes a weight instead of 1.125, and decode is memory-bound); token
//    tiles first widen a row group to the narrow bytes form in a per-thread
//    buffer, once per call, so prefill multiplies as it does for bytes.
//    Compact Q8_0 (no stored m) makes m = -128 d in registers: exactly the
//    stored value the bytes layout holds.
//
// Up to 4 tokens share each loaded and unpacked weight vector (register
// tiling, as the AVX-512 body does with 8): on AVX2 the unpacking costs as
// much as the products, so paying it once per token made prefill run at the
// speed of the unpacking. A half (8 rows) is run over all blocks at a time so
// that 4 tokens' accumulators and the unpacked weights fit the 16 ymm
// registers; its second pass reads the group's weights from L1/L2.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/engine/ops/aligned_buffer.hpp"
#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/cpu/token_tiles.hpp"

namespace midtune::engine {

namespace {

inline __m256i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// One half's 8 d and 8 m of a block from its factors (16 fp16 d, then 16 m
// unless the matrix implies them: Zero = its implied_zero, m = -Zero d,
// exactly the fp16 value the bytes layout stores).
template <int Zero>
inline void load_factors(const std::uint8_t* factors, int half, __m256& d, __m256& m) {
  d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(factors + half * 16)));
  if constexpr (Zero != 0) {
    m = _mm256_mul_ps(d, _mm256_set1_ps(-static_cast<float>(Zero)));
  } else {
    m = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(factors + 32 + half * 16)));
  }
}

// Bit `bit` of every byte of a fifth-bit plane, moved to bit 4 (16-bit
// shifts: the mask keeps each byte's own bit, since bit - 4 stays in -4..3).
inline __m256i fifth_bits(__m256i plane, int bit) {
  const __m256i moved = bit <= 4 ? _mm256_slli_epi16(plane, 4 - bit) : _mm256_srli_epi16(plane, bit - 4);
  return _mm256_and_si256(moved, _mm256_set1_epi8(0x10));
}

// Nibble chunk c of a compact 5-bit half joined with its fifth bits: lo
// holds u[r][4c+j], hi u[r][16+4c+j].
inline void join_fifth_bits(__m256i packed, __m256i plane, int c, __m256i& lo, __m256i& hi) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  lo = _mm256_or_si256(_mm256_and_si256(packed, low_nibbles), fifth_bits(plane, 2 * c));
  hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles), fifth_bits(plane, 2 * c + 1));
}

// The bytes layout's stride: 8 chunks of u, 16 d, 16 m.
constexpr std::size_t kBytesStride = 512 + 4 * kPackRows;

// A compact 5-bit row group widened to the bytes layout in `out` (blocks x
// kBytesStride bytes, 32-byte aligned), its m made where implied.
void widen_group(const PackedMatrix& w, int group, std::uint8_t* out) {
  const __m256 minus_zero = _mm256_set1_ps(-static_cast<float>(w.implied_zero));
  for (int b = 0; b < w.blocks; ++b) {
    const std::uint8_t* blk = w.at(group, b);
    std::uint8_t* dst = out + b * kBytesStride;
    for (int half = 0; half < 2; ++half) {
      const __m256i plane = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 256 + half * 32));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        join_fifth_bits(_mm256_load_si256(reinterpret_cast<const __m256i*>(blk + c * 64 + half * 32)), plane, c, lo,
                        hi);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + c * 64 + half * 32), lo);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (4 + c) * 64 + half * 32), hi);
      }
    }
    if (w.implied_zero == 0) {
      std::memcpy(dst + 512, blk + w.quant_bytes(), 4 * kPackRows);
      continue;
    }
    std::memcpy(dst + 512, blk + w.quant_bytes(), 2 * kPackRows);
    for (int half = 0; half < 2; ++half) {
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dst + 512 + half * 16)));
      _mm_store_si128(reinterpret_cast<__m128i*>(dst + 512 + 2 * kPackRows + half * 16),
                      _mm256_cvtps_ph(_mm256_mul_ps(d, minus_zero), _MM_FROUND_TO_NEAREST_INT));
    }
  }
}

// Rows [8 half, 8 half + 8) of `group` for tokens [t0, t0 + M); `lanes` of
// the 8 outputs exist (a partial last group). The group's `blocks` blocks
// start at `first`, `stride` bytes apart (the matrix's, or a widened copy).
// Kept out of line: inlined into tile(), GCC allocates its registers worse
// and prefill ran ~20 % slower.
template <int Bits, int M, int Zero>
__attribute__((noinline)) void half_tile(const std::uint8_t* first, std::size_t stride, int blocks, int group,
                                         int half, const QuantizedRows& x, int t0, float* y, std::size_t ldy,
                                         int lanes) {
  constexpr std::size_t kQuantBytes = Bits == 4 ? 256 : 512;
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i sixteens16 = _mm256_set1_epi16(16);
  const std::int8_t* a[M];
  const float* xd[M];
  const float* xs[M];
  __m256 acc[M];
  for (int t = 0; t < M; ++t) {
    a[t] = x.row_q(t0 + t);
    xd[t] = x.row_d(t0 + t);
    xs[t] = x.row_s(t0 + t);
    acc[t] = _mm256_setzero_ps();
  }
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = first + b * stride;
    const std::uint8_t* quants = blk + half * 32;
    __m256i dot[M];
    if constexpr (Bits == 4) {
      // Chunk c holds k = 4c..4c+3 in its low nibbles and 16+4c.. in its high.
      __m256i sum16[M];
      for (int t = 0; t < M; ++t) sum16[t] = _mm256_setzero_si256();
      // Unrolled twice, not fully: fully unrolled, GCC hoists every product
      // ahead of the adds and spills them; not at all, it copies every
      // accumulator once per step.
#pragma GCC unroll 2
      for (int c = 0; c < 4; ++c) {
        const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(quants + c * 64));
        const __m256i lo = _mm256_and_si256(packed, low_nibbles);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
#pragma GCC unroll 4
        for (int t = 0; t < M; ++t) {
          const std::int8_t* at = a[t] + b * kQuantBlock + 4 * c;
          const __m256i both = _mm256_add_epi16(_mm256_maddubs_epi16(lo, broadcast4(at)),
                                                _mm256_maddubs_epi16(hi, broadcast4(at + 16)));
          sum16[t] = _mm256_add_epi16(sum16[t], both);
        }
      }
      for (int t = 0; t < M; ++t) dot[t] = _mm256_madd_epi16(sum16[t], ones16);
    } else if constexpr (Bits == 5) {
      for (int t = 0; t < M; ++t) dot[t] = _mm256_setzero_si256();
      for (int steps = 0; steps < 8; steps += 4) {
        __m256i sum16[M];
        for (int t = 0; t < M; ++t) sum16[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int c = steps; c < steps + 4; ++c) {
          const __m256i bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(quants + c * 64));
#pragma GCC unroll 4
          for (int t = 0; t < M; ++t) {
            sum16[t] = _mm256_add_epi16(
                sum16[t], _mm256_maddubs_epi16(bytes, broadcast4(a[t] + b * kQuantBlock + 4 * c)));
          }
        }
        for (int t = 0; t < M; ++t) dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(sum16[t], ones16));
      }
    } else {
      __m256i lo16[M], hi16[M];
      for (int t = 0; t < M; ++t) lo16[t] = hi16[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
      for (int c = 0; c < 8; ++c) {
        const __m256i bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(quants + c * 64));
        const __m256i lo = _mm256_and_si256(bytes, low_nibbles);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_nibbles);
#pragma GCC unroll 4
        for (int t = 0; t < M; ++t) {
          const __m256i act = broadcast4(a[t] + b * kQuantBlock + 4 * c);
          const __m256i plo = _mm256_maddubs_epi16(lo, act);
          const __m256i phi = _mm256_maddubs_epi16(hi, act);
          lo16[t] = _mm256_add_epi16(lo16[t], plo);
          hi16[t] = _mm256_add_epi16(hi16[t], phi);
        }
      }
      for (int t = 0; t < M; ++t) {
        dot[t] = _mm256_add_epi32(_mm256_madd_epi16(lo16[t], ones16), _mm256_madd_epi16(hi16[t], sixteens16));
      }
    }
    __m256 d, m;
    load_factors<Zero>(blk + kQuantBytes, half, d, m);
    for (int t = 0; t < M; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]), _mm256_mul_ps(d, _mm256_set1_ps(xd[t][b])), acc[t]);
      acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(xs[t][b]), acc[t]);
    }
  }
  for (int t = 0; t < M; ++t) {
    float* dst = y + static_cast<std::size_t>(t0 + t) * ldy + group * kPackRows + half * 8;
    if (lanes == 8) {
      _mm256_storeu_ps(dst, acc[t]);
    } else {
      alignas(32) float out[8];
      _mm256_store_ps(out, acc[t]);
      for (int r = 0; r < lanes; ++r) dst[r] = out[r];
    }
  }
}

// One token (decode): both halves per block, so that the weights stream
// through once (software prefetch, which the AVX-512 body uses, was tried
// here and gained nothing). Each activation broadcast serves both halves
// within a chunk step, with the halves' sums in arrays of two: looping over
// the halves outside the steps let GCC hoist a whole block's broadcasts and
// spill them (and the accumulators) to the stack, and the output matrix of
// a large vocabulary ran below the memory's speed.
// Bits 4, 5 (narrow bytes), 8 (full bytes), or kCompactFive (nibbles and a
// fifth-bit plane).
constexpr int kCompactFive = 55;

template <int Bits, int Zero>
void one_token(const PackedMatrix& w, int group, const QuantizedRows& x, int t, float* y, std::size_t ldy,
               int rows) {
  const std::size_t quant_bytes = w.quant_bytes();
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i sixteens16 = _mm256_set1_epi16(16);
  const std::int8_t* a = x.row_q(t);
  const float* xd = x.row_d(t);
  const float* xs = x.row_s(t);
  const auto chunk = [](const std::uint8_t* blk, int c, int half) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + c * 64 + half * 32));
  };
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int b = 0; b < w.blocks; ++b, a += kQuantBlock) {
    const std::uint8_t* blk = w.at(group, b);
    __m256i dot[2];
    if constexpr (Bits == kCompactFive) {
      // Two chunks' pair sums stay below 2 x 2 x (2 x 31 x 128) < 32768.
      const __m256i plane[2] = {_mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 256)),
                                _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 256 + 32))};
      dot[0] = dot[1] = _mm256_setzero_si256();
#pragma GCC unroll 2
      for (int c = 0; c < 4; c += 2) {
        __m256i sum16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
        for (int cc = c; cc < c + 2; ++cc) {
          const __m256i act_lo = broadcast4(a + 4 * cc), act_hi = broadcast4(a + 16 + 4 * cc);
          for (int half = 0; half < 2; ++half) {
            __m256i lo, hi;
            join_fifth_bits(chunk(blk, cc, half), plane[half], cc, lo, hi);
            sum16[half] = _mm256_add_epi16(
                sum16[half], _mm256_add_epi16(_mm256_maddubs_epi16(lo, act_lo), _mm256_maddubs_epi16(hi, act_hi)));
          }
        }
        for (int half = 0; half < 2; ++half) {
          dot[half] = _mm256_add_epi32(dot[half], _mm256_madd_epi16(sum16[half], ones16));
        }
      }
    } else if constexpr (Bits == 4) {
      __m256i sum16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int c = 0; c < 4; ++c) {
        const __m256i act_lo = broadcast4(a + 4 * c), act_hi = broadcast4(a + 16 + 4 * c);
        for (int half = 0; half < 2; ++half) {
          const __m256i packed = chunk(blk, c, half);
          const __m256i lo = _mm256_and_si256(packed, low_nibbles);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
          sum16[half] = _mm256_add_epi16(
              sum16[half], _mm256_add_epi16(_mm256_maddubs_epi16(lo, act_lo), _mm256_maddubs_epi16(hi, act_hi)));
        }
      }
      for (int half = 0; half < 2; ++half) dot[half] = _mm256_madd_epi16(sum16[half], ones16);
    } else if constexpr (Bits == 5) {
      dot[0] = dot[1] = _mm256_setzero_si256();
      for (int steps = 0; steps < 8; steps += 4) {
        __m256i sum16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int c = steps; c < steps + 4; ++c) {
          const __m256i act = broadcast4(a + 4 * c);
          for (int half = 0; half < 2; ++half) {
            sum16[half] = _mm256_add_epi16(sum16[half], _mm256_maddubs_epi16(chunk(blk, c, half), act));
          }
        }
        for (int half = 0; half < 2; ++half) {
          dot[half] = _mm256_add_epi32(dot[half], _mm256_madd_epi16(sum16[half], ones16));
        }
      }
    } else {
      const std::int8_t* digits = x.row_digits(t) + b * 2 * kQuantBlock;
      __m256i lo16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      __m256i hi16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
      for (int c = 0; c < 8; ++c) {
        const __m256i digit_lo = broadcast4(digits + 4 * c), digit_hi = broadcast4(digits + kQuantBlock + 4 * c);
        for (int half = 0; half < 2; ++half) {
          const __m256i bytes = chunk(blk, c, half);
          lo16[half] = _mm256_add_epi16(lo16[half], _mm256_maddubs_epi16(bytes, digit_lo));
          hi16[half] = _mm256_add_epi16(hi16[half], _mm256_maddubs_epi16(bytes, digit_hi));
        }
      }
      for (int half = 0; half < 2; ++half) {
        dot[half] = _mm256_add_epi32(_mm256_madd_epi16(lo16[half], ones16), _mm256_madd_epi16(hi16[half], sixteens16));
      }
    }
    for (int half = 0; half < 2; ++half) {
      __m256 d, m;
      load_factors<Zero>(blk + quant_bytes, half, d, m);
      acc[half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[half]), _mm256_mul_ps(d, _mm256_set1_ps(xd[b])), acc[half]);
      acc[half] = _mm256_fmadd_ps(m, _mm256_set1_ps(xs[b]), acc[half]);
    }
  }
  float* dst = y + static_cast<std::size_t>(t) * ldy + group * kPackRows;
  if (rows == kPackRows) {
    _mm256_storeu_ps(dst, acc[0]);
    _mm256_storeu_ps(dst + 8, acc[1]);
  } else {
    alignas(32) float out[kPackRows];
    _mm256_store_ps(out, acc[0]);
    _mm256_store_ps(out + 8, acc[1]);
    for (int r = 0; r < rows; ++r) dst[r] = out[r];
  }
}

// A row group's bytes widened from the compact layout, per thread.
std::uint8_t* widening_buffer(std::size_t bytes) {
  thread_local AlignedBuffer<std::uint8_t> buffer;
  buffer.ensure(bytes);
  return buffer.data();
}

template <int Bits, int Zero>
void tile_avx2(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1, float* y,
               std::size_t ldy) {
  const int rows = w.rows - group * kPackRows < kPackRows ? w.rows - group * kPackRows : kPackRows;
  // 4 tokens: fewer share each unpacking less, and 5 or more spill the
  // accumulators out of the 16 ymm registers.
  constexpr int kTile = 4;
  // One token: the decode path, with digits for full bytes (a lone token at
  // the end of a prefill's token chunks has none and runs as a tile of 1).
  if (t1 - t0 == 1 && (Bits != 8 || x.has_digits)) {
    one_token<Bits, Zero>(w, group, x, t0, y, ldy, rows);
    return;
  }
  if constexpr (Bits == kCompactFive) {
    std::uint8_t* wide = widening_buffer(static_cast<std::size_t>(w.blocks) * kBytesStride);
    widen_group(w, group, wide);
    cpu::for_half_token_tiles<kTile>(rows, t0, t1, [&]<int M>(int half, int t, int lanes) {
      half_tile<5, M, 0>(wide, kBytesStride, w.blocks, group, half, x, t, y, ldy, lanes);
    });
  } else {
    cpu::for_half_token_tiles<kTile>(rows, t0, t1, [&]<int M>(int half, int t, int lanes) {
      half_tile<Bits, M, Zero>(w.at(group, 0), w.block_stride, w.blocks, group, half, x, t, y, ldy, lanes);
    });
  }
}

// m stored, or implied as -Zero d: the one zero point a matrix of these
// bits can imply (packed_matrix.hpp: Q4_0 8, Q5_0 16, Q8_0 128).
template <int Bits, int Zero>
void stored_or_implied_tile(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1, float* y,
                            std::size_t ldy) {
  if (w.implied_zero == 0) {
    tile_avx2<Bits, 0>(w, group, x, t0, t1, y, ldy);
  } else {
    tile_avx2<Bits, Zero>(w, group, x, t0, t1, y, ldy);
  }
}

void tile(const PackedMatrix& w, int group, const QuantizedRows& x, int t0, int t1, float* y,
          std::size_t ldy) {
  if (w.bits == 4) {
    stored_or_implied_tile<4, 8>(w, group, x, t0, t1, y, ldy);
  } else if (w.bits == 5) {
    stored_or_implied_tile<kCompactFive, 16>(w, group, x, t0, t1, y, ldy);
  } else if (w.narrow(group)) {  // (a Q8_0 group whose q all lie below -96 too)
    stored_or_implied_tile<5, 128>(w, group, x, t0, t1, y, ldy);
  } else {
    stored_or_implied_tile<8, 128>(w, group, x, t0, t1, y, ldy);
  }
}

}  // namespace

namespace cpu {
PackedTileFn matmul_tile_avx2() { return &tile; }
}  // namespace cpu

}  // namespace midtune::engine
