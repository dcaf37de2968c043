// The SIMD float matmul tile, once for every ISA (V: vec.hpp traits), for one
// 16-row group: weights of column k for the group are 16 contiguous elements
// (16 / V::kLanes registers; bf16 by column pairs, float_matrix.hpp), widened
// to fp32, multiplied by the broadcast activation x[t][k] into fp32
// accumulators. Included only by
// the per-ISA translation units.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/engine/ops/float_matrix.hpp"

namespace midtune::engine::cpu {

template <class V, FloatFormat F>
struct FloatMatmulBody {
  using reg = typename V::reg;
  static constexpr int kRegs = kPackRows / V::kLanes;
  // Tokens per prefill sub-tile: kTokens x kRegs accumulators, kRegs weight
  // registers and one broadcast fit in the register file (16 ymm, 32 zmm).
  // (bf16 holds a second column's kRegs weights: 5 tokens on AVX2.)
  static constexpr int kTokens = V::kLanes == 8 ? (F == FloatFormat::bf16 ? 5 : 6) : 12;
  // Row groups per decode call: 8 accumulators either way.
  static constexpr int kGroups = V::kLanes == 8 ? 4 : 8;
  static constexpr std::size_t kElem = F == FloatFormat::f32 ? 4 : 2;

  // The 16 weights of the group at column k, as fp32 (f32, f16).
  static void load_column(const std::uint8_t* wg, int k, reg* w) {
    for (int i = 0; i < kRegs; ++i) {
      const std::uint8_t* p = wg + (static_cast<std::size_t>(k) * kPackRows + i * V::kLanes) * kElem;
      if constexpr (F == FloatFormat::f32) {
        w[i] = V::load(reinterpret_cast<const float*>(p));
      } else {
        w[i] = V::load_f16(reinterpret_cast<const std::uint16_t*>(p));
      }
    }
  }
  // bf16: the group's columns k and k + 1 (k even) are stored as 32-bit
  // pairs (float_matrix.hpp); the low half (column k) shifted up and the high
  // half masked are each exactly the fp32 value.
  static void load_pair(const std::uint8_t* wg, int k, reg* even, reg* odd) {
    for (int i = 0; i < kRegs; ++i) {
      const std::uint8_t* p = wg + (static_cast<std::size_t>(k) * kPackRows + i * 2 * V::kLanes) * kElem;
      V::split_bf16_pairs(p, even[i], odd[i]);
    }
  }

  // Calls step(w, k) for every column k in order with the group's 16 weights.
  template <class Step>
  static void for_each_column(const std::uint8_t* wg, int cols, Step&& step) {
    reg w[kRegs];
    if constexpr (F == FloatFormat::bf16) {
      reg odd[kRegs];
      int k = 0;
      for (; k + 2 <= cols; k += 2) {
        load_pair(wg, k, w, odd);
        step(w, k);
        step(odd, k + 1);
      }
      if (k < cols) {
        load_pair(wg, k, w, odd);
        step(w, k);
      }
    } else {
      for (int k = 0; k < cols; ++k) {
        load_column(wg, k, w);
        step(w, k);
      }
    }
  }

  static void store_rows(float* dst, const reg* acc, int rows) {
    alignas(64) float out[kPackRows];
    for (int i = 0; i < kRegs; ++i) V::store(out + i * V::kLanes, acc[i]);
    std::copy(out, out + rows, dst);
  }

  // NT tokens against the group: every output is one FMA chain over k in
  // order, whatever NT, so a token's result does not depend on the tile it
  // falls in (batched prefill, chunked prefill and decode agree bit for bit).
  template <int NT>
  static void tokens_tile(const std::uint8_t* wg, int cols, const float* x, std::size_t ldx, float* y,
                          std::size_t ldy, int rows) {
    reg acc[NT][kRegs];
    for (auto& a : acc)
      for (reg& r : a) r = V::zero();
    for_each_column(wg, cols, [&](const reg* w, int k) {
      for (int t = 0; t < NT; ++t) {
        const reg xb = V::set1(x[static_cast<std::size_t>(t) * ldx + k]);
        for (int i = 0; i < kRegs; ++i) acc[t][i] = V::fmadd(w[i], xb, acc[t][i]);
      }
    });
    for (int t = 0; t < NT; ++t) store_rows(y + static_cast<std::size_t>(t) * ldy, acc[t], rows);
  }

  // One token against G consecutive groups (decode): G independent FMA
  // chains hide the FMA latency; each output's chain is the same as in
  // tokens_tile, so the result is too.
  template <int G>
  static void token_groups(const FloatMatrix& w, int g0, const float* x, float* y) {
    reg acc[G][kRegs];
    for (auto& a : acc)
      for (reg& r : a) r = V::zero();
    const std::uint8_t* wg[G];
    for (int g = 0; g < G; ++g) wg[g] = w.group(g0 + g);
    if constexpr (F == FloatFormat::bf16) {
      const auto pair_step = [&](int k, bool both) {
        const reg x0 = V::set1(x[k]);
        const reg x1 = V::set1(both ? x[k + 1] : 0.0f);
        for (int g = 0; g < G; ++g) {
          reg even[kRegs], odd[kRegs];
          load_pair(wg[g], k, even, odd);
          for (int i = 0; i < kRegs; ++i) acc[g][i] = V::fmadd(even[i], x0, acc[g][i]);
          if (both) {
            for (int i = 0; i < kRegs; ++i) acc[g][i] = V::fmadd(odd[i], x1, acc[g][i]);
          }
        }
      };
      int k = 0;
      for (; k + 2 <= w.cols; k += 2) pair_step(k, true);
      if (k < w.cols) pair_step(k, false);
    } else {
      for (int k = 0; k < w.cols; ++k) {
        const reg xb = V::set1(x[k]);
        for (int g = 0; g < G; ++g) {
          reg col[kRegs];
          load_column(wg[g], k, col);
          for (int i = 0; i < kRegs; ++i) acc[g][i] = V::fmadd(col[i], xb, acc[g][i]);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      store_rows(y + (g0 + g) * kPackRows, acc[g], std::min(kPackRows, w.rows - (g0 + g) * kPackRows));
    }
  }

  static void run(const FloatMatrix& w, int g0, int g1, const float* x, std::size_t ldx, int t0, int t1, float* y,
                  std::size_t ldy) {
    int t = t0;
    for (; t + kTokens <= t1; t += kTokens) {
      for (int group = g0; group < g1; ++group) {
        tokens_tile<kTokens>(w.group(group), w.cols, x + static_cast<std::size_t>(t) * ldx, ldx,
                             y + static_cast<std::size_t>(t) * ldy + group * kPackRows, ldy,
                             std::min(kPackRows, w.rows - group * kPackRows));
      }
    }
    for (; t < t1; ++t) {
      const float* xt = x + static_cast<std::size_t>(t) * ldx;
      float* yt = y + static_cast<std::size_t>(t) * ldy;
      int group = g0;
      for (; group + kGroups <= g1; group += kGroups) token_groups<kGroups>(w, group, xt, yt);
      for (; group < g1; ++group) token_groups<1>(w, group, xt, yt);
    }
  }
};

// The body for w's storage format.
template <class V>
void float_tile_body(const FloatMatrix& w, int g0, int g1, const float* x, std::size_t ldx, int t0, int t1,
                     float* y, std::size_t ldy) {
  switch (w.format) {
    case FloatFormat::f32: return FloatMatmulBody<V, FloatFormat::f32>::run(w, g0, g1, x, ldx, t0, t1, y, ldy);
    case FloatFormat::f16: return FloatMatmulBody<V, FloatFormat::f16>::run(w, g0, g1, x, ldx, t0, t1, y, ldy);
    case FloatFormat::bf16: return FloatMatmulBody<V, FloatFormat::bf16>::run(w, g0, g1, x, ldx, t0, t1, y, ldy);
  }
}

}  // namespace midtune::engine::cpu
