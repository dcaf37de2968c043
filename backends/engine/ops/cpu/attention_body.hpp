// The SIMD attention body, once for every ISA (V: vec.hpp traits) and
// cache form (fp32 or bf16, widened as loaded):
// scores for kLanes keys per FMA chain over the transposed keys, a
// vectorised exp (exp.hpp), and p V with the sub-tile's queries sharing each
// value-row load. Queries go in sub-tiles of V::kMaxTileRows so their
// accumulators stay in registers. Included only by the per-ISA translation
// units.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backends/engine/ops/attention.hpp"
#include "backends/engine/ops/cpu/exp.hpp"

namespace midtune::engine::cpu {

template <class V>
struct AttentionBody {
  using reg = typename V::reg;
  static constexpr int L = V::kLanes;

  // The cache's elements as floats (C: attention.hpp's CacheView, fp32 or
  // bf16).
  static reg load_kv(const float* p) { return V::load(p); }
  static reg load_kv(const std::uint16_t* p) { return V::load_bf16(p); }

  // Scaled scores of queries [r0, r0 + R) against keys [k_begin, k_end)
  // (k_begin a multiple of 16), into rows of max_limit floats,
  // V::kScoreKeyVectors vectors of keys per pass. A key block always holds
  // 16 keys (the layout's padding), so whole vectors load; only the valid
  // lanes are stored. Each score is the same FMA chain over the head
  // dimension whatever the pass width.
  template <int R, class C>
  static void scores(const AttentionTile& tile, int r0, const C& kv, float scale, float* scratch, int max_limit,
                     int k_begin, int k_end) {
    constexpr int N = V::kScoreKeyVectors;
    static_assert(N * L <= kKeyBlock && kKeyBlock % (N * L) == 0, "a pass stays inside one key block");
    for (int k0 = k_begin; k0 < k_end; k0 += N * L) {
      reg acc[R][N];
      for (int r = 0; r < R; ++r) {
        for (int j = 0; j < N; ++j) acc[r][j] = V::zero();
      }
      const auto* block = kv.kt + static_cast<std::size_t>(k0 / kKeyBlock) * kv.head_dim * kKeyBlock + k0 % kKeyBlock;
      for (int i = 0; i < kv.head_dim; ++i) {
        reg keys[N];
        for (int j = 0; j < N; ++j) keys[j] = load_kv(block + i * kKeyBlock + j * L);
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const reg q = V::set1(tile.q[r0 + r][i]);
          for (int j = 0; j < N; ++j) acc[r][j] = V::fmadd(q, keys[j], acc[r][j]);
        }
      }
      for (int j = 0; j < N; ++j) {
        const int kj = k0 + j * L;
        if (kj >= k_end) break;
        const int valid = std::min(L, k_end - kj);
        for (int r = 0; r < R; ++r) {
          V::store_first(scratch + static_cast<std::size_t>(r0 + r) * max_limit + kj,
                         V::mul(acc[r][j], V::set1(scale)), valid);
        }
      }
    }
  }

  // p = softmax(p) over `limit` scores, in place.
  // The softmax's denominator, sum exp(p - max_score): its log-sum-exp is
  // max_score + log(sum), taken only where a caller reads it out.
  struct Denominator {
    float max_score, sum;
  };
  static Denominator softmax_row(float* p, int limit) {
    reg best = V::set1(-3.0e38f);
    for (int k = 0; k < limit; k += L) best = V::max(best, V::load_first(p + k, std::min(L, limit - k), -3.0e38f));
    const float max_value = V::reduce_max(best);
    const reg max_all = V::set1(max_value);
    reg sum = V::zero();
    int k = 0;
    for (; k + L <= limit; k += L) {
      const reg e = exp_ps<V>(V::sub(V::load(p + k), max_all));
      sum = V::add(sum, e);
      V::store(p + k, e);
    }
    reg tail = V::zero();
    if (k < limit) {
      tail = exp_ps<V>(V::sub(V::load_first(p + k, limit - k, 0.0f), max_all));
      V::store_first(p + k, tail, limit - k);
    }
    const float total = V::sum_with_tail(sum, tail, limit - k);
    const reg inv = V::set1(1.0f / total);
    for (k = 0; k < limit; k += L) {
      const int n = std::min(L, limit - k);
      V::store_first(p + k, V::mul(V::load_first(p + k, n, 0.0f), inv), n);
    }
    return {max_value, total};
  }

  // out = p V for queries [r0, r0 + R), 2 x kLanes dims per pass over each
  // chunk of kValueKeyChunk keys (attention.hpp: chunk sums from zero, added
  // in order). Rows shorter than max_limit have zero weights past their
  // limit, so every query runs over the same key range.
  template <int R, class C>
  static void weighted_values(const AttentionTile& tile, int r0, const C& kv, const float* scratch, int max_limit) {
    for (int k0 = 0; k0 < max_limit; k0 += kValueKeyChunk) {
      const int k1 = std::min(max_limit, k0 + kValueKeyChunk);
      for (int c = 0; c < kv.head_dim; c += 2 * L) {
        const bool two = kv.head_dim - c >= 2 * L;
        reg acc[R][2];
        for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = V::zero();
        const auto* vk = kv.v + static_cast<std::size_t>(k0) * kv.v_ld + c;
        for (int k = k0; k < k1; ++k, vk += kv.v_ld) {
          const reg v0 = load_kv(vk);
          const reg v1 = two ? load_kv(vk + L) : V::zero();
#pragma GCC unroll 12
          for (int r = 0; r < R; ++r) {
            const reg weight = V::set1(scratch[static_cast<std::size_t>(r0 + r) * max_limit + k]);
            acc[r][0] = V::fmadd(weight, v0, acc[r][0]);
            acc[r][1] = V::fmadd(weight, v1, acc[r][1]);
          }
        }
        for (int r = 0; r < R; ++r) {
          float* out = tile.out[r0 + r] + c;
          V::store(out, k0 == 0 ? acc[r][0] : V::add(V::load(out), acc[r][0]));
          if (two) V::store(out + L, k0 == 0 ? acc[r][1] : V::add(V::load(out + L), acc[r][1]));
        }
      }
    }
  }

  // One key chunk's p V for queries [r0, r0 + R) into their partial rows
  // (head_dim floats each): each value row read whole, in key order, the
  // running sums waiting in `partial`. The body's pass over a few dims at
  // a time reads 64 bytes of every row, a stride the hardware prefetchers
  // do not follow, at half the memory's speed; a decode step streams its
  // whole cache here. Each output is the body's FMA chain.
  template <int R, class C>
  static void chunk_values(int r0, const C& kv, const float* scratch, int max_limit, int k_begin, int k_end,
                           float* partial) {
    const float* w[R];
    float* sums[R];
    for (int r = 0; r < R; ++r) {
      w[r] = scratch + static_cast<std::size_t>(r0 + r) * max_limit;
      sums[r] = partial + static_cast<std::size_t>(r0 + r) * kv.head_dim;
    }
    for (int k = k_begin; k < k_end; ++k) {
      const auto* row = kv.v + static_cast<std::size_t>(k) * kv.v_ld;
      for (int c = 0; c < kv.head_dim; c += L) {
        const reg v = load_kv(row + c);
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const reg sum = k == k_begin ? V::zero() : V::load(sums[r] + c);
          V::store(sums[r] + c, V::fmadd(V::set1(w[r][k]), v, sum));
        }
      }
    }
  }

  // Query r's softmax over its scores, the zeros outside [first, limit) and
  // the readouts.
  static void finish_row(const AttentionTile& tile, int r, float* scratch, int max_limit) {
    float* p = scratch + static_cast<std::size_t>(r) * max_limit;
    const int first = tile.first[r];
    shape_scores(tile, r, p);
    const Denominator denominator = softmax_row(p + first, tile.limit[r] - first);
    std::fill(p, p + first, 0.0f);  // before a sliding window
    std::fill(p + tile.limit[r], p + max_limit, 0.0f);
    if (tile.key0_weight != nullptr) tile.key0_weight[r] = p[0];
    if (tile.log_sum_exp != nullptr) tile.log_sum_exp[r] = denominator.max_score + std::log(denominator.sum);
    if (tile.probs_out[r] != nullptr) std::memcpy(tile.probs_out[r], p, sizeof(float) * tile.limit[r]);
  }

  template <int R, class C>
  static void sub_tile(const AttentionTile& tile, int r0, const C& kv, float scale, float* scratch, int max_limit) {
    scores<R>(tile, r0, kv, scale, scratch, max_limit, 0, max_limit);
    for (int r = r0; r < r0 + R; ++r) finish_row(tile, r, scratch, max_limit);
    weighted_values<R>(tile, r0, kv, scratch, max_limit);
  }

  // The last count % kMaxTileRows queries: one sub-tile of that size.
  template <class C, int... Rs>
  static void remainder(int rows, const AttentionTile& tile, int r0, const C& kv, float scale, float* scratch,
                        int max_limit, std::integer_sequence<int, Rs...>) {
    ((rows == Rs + 1 ? sub_tile<Rs + 1>(tile, r0, kv, scale, scratch, max_limit) : void()), ...);
  }

  static void run(const AttentionTile& tile, const KeyValueView& kv, float scale, float* scratch) {
    if (kv.head_dim % kKeyBlock != 0) {
      attention_scalar()(tile, kv, scale, scratch);
      return;
    }
    int max_limit = 0;
    for (int r = 0; r < tile.count; ++r) max_limit = std::max(max_limit, tile.limit[r]);
    with_cache(kv, [&](const auto& cache) {
      constexpr int kRows = V::kMaxTileRows;
      int r0 = 0;
      for (; r0 + kRows <= tile.count; r0 += kRows) sub_tile<kRows>(tile, r0, cache, scale, scratch, max_limit);
      if (r0 < tile.count) {
        remainder(tile.count - r0, tile, r0, cache, scale, scratch, max_limit,
                  std::make_integer_sequence<int, kRows - 1>());
      }
    });
  }

  // The parts (AttentionParts): the same sub-tiles and the same functions as
  // run, over a range of keys or of output dims.
  template <class F, int... Rs>
  static void remainder_rows(int rows, int r0, const F& f, std::integer_sequence<int, Rs...>) {
    ((rows == Rs + 1 ? f(std::integral_constant<int, Rs + 1>{}, r0) : void()), ...);
  }
  template <class F>
  static void for_sub_tiles(int count, const F& f) {
    constexpr int kRows = V::kMaxTileRows;
    int r0 = 0;
    for (; r0 + kRows <= count; r0 += kRows) f(std::integral_constant<int, kRows>{}, r0);
    if (r0 < count) remainder_rows(count - r0, r0, f, std::make_integer_sequence<int, kRows - 1>());
  }
  static void part_scores(const AttentionTile& tile, const KeyValueView& kv, float scale, float* scratch,
                          int max_limit, int k_begin, int k_end) {
    with_cache(kv, [&](const auto& cache) {
      for_sub_tiles(tile.count, [&](auto rows, int r0) {
        scores<decltype(rows)::value>(tile, r0, cache, scale, scratch, max_limit, k_begin, k_end);
      });
    });
  }
  static void part_values(const AttentionTile& tile, const KeyValueView& kv, const float* scratch, int max_limit,
                          int k_begin, int k_end, float* partial) {
    with_cache(kv, [&](const auto& cache) {
      for_sub_tiles(tile.count, [&](auto rows, int r0) {
        chunk_values<decltype(rows)::value>(r0, cache, scratch, max_limit, k_begin, k_end, partial);
      });
    });
  }
  static AttentionParts parts() { return {&part_scores, &finish_row, &part_values}; }
};

}  // namespace midtune::engine::cpu
