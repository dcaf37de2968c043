// The CUDA flash attention body's tiling arithmetic (ops/flash_attention_tiles.hpp)
// on the host: which key tiles a block of queries visits and which of them
// need the mask, checked key by key against the visibility rule; and the
// kernel's tiled online softmax, replayed on the host with the same
// functions (tiles, masks, log2 scores, rescaling) in float, against the
// host reference's attention (outputs and key-0 weights), exactly and with
// the kernel's fp16 rounding of Q, K, V and P (within the GPU test's
// tolerance). The kernel itself is checked on a GPU (device_bodies_test's
// PrefillAttentionBodies).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/engine/devices/reference/reference_ops.hpp"
#include "backends/engine/ops/flash_attention_tiles.hpp"
#include "backends/engine/ops/fp16.hpp"

namespace midtune::engine {
namespace {

struct Shape {
  int tokens, past, window, key_tile;
};

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  // Every past up to 70: the diagonal and the window's edge at every offset in a tile.
  for (const int tokens : {1, 31, 65, 130}) {
    for (int past = 0; past <= 70; ++past) {
      for (const int window : {0, 1, 7, 64, 90, 1000}) {
        for (const int key_tile : {32, 64}) out.push_back({tokens, past, window, key_tile});
      }
    }
  }
  return out;
}

std::string describe(const Shape& s, int rows, int t0) {
  return "tokens " + std::to_string(s.tokens) + ", past " + std::to_string(s.past) + ", window " +
         std::to_string(s.window) + ", key tile " + std::to_string(s.key_tile) + ", block of " + std::to_string(rows) +
         " at " + std::to_string(t0);
}

// Every key a query of the block sees lies in a visited tile; every visited
// tile holds a key some query sees; a tile the kernel leaves unmasked is
// seen whole by every query (the clipped rows included: they recompute the
// last token), and a masked one is not. Blocks of 64 and 128 queries (the
// kernel's one and two row tiles a warp).
TEST(FlashAttentionTiles, VisitedTilesAndMasksMatchTheVisibilityRule) {
  int masked = 0, unmasked = 0;
  for (const int rows : {64, 128}) {
    for (const Shape& s : shapes()) {
      const int keys = s.past + s.tokens;
      for (int t0 = 0; t0 < s.tokens; t0 += rows) {
        SCOPED_TRACE(describe(s, rows, t0));
        const flash::TileRange tiles = flash::key_tiles(t0, rows, s.tokens, s.past, s.window, s.key_tile);
        ASSERT_LE(tiles.begin, tiles.end);
        ASSERT_LE(tiles.end * s.key_tile, keys + s.key_tile - 1);  // no tile wholly past the cache
        const int t1 = flash::last_query(t0, rows, s.tokens);
        for (int t = t0; t <= t1; ++t) {
          for (int key = 0; key < keys; ++key) {
            if (flash::key_visible(t, key, s.past, s.window)) {
              ASSERT_GE(key / s.key_tile, tiles.begin) << "query " << t << " key " << key;
              ASSERT_LT(key / s.key_tile, tiles.end) << "query " << t << " key " << key;
            }
          }
        }
        for (int j = tiles.begin; j < tiles.end; ++j) {
          bool any = false, all = true;
          for (int r = 0; r < rows; ++r) {
            const int t = std::min(t0 + r, s.tokens - 1);
            for (int key = j * s.key_tile; key < (j + 1) * s.key_tile; ++key) {
              const bool seen = key < keys && flash::key_visible(t, key, s.past, s.window);
              any = any || seen;
              all = all && seen;
            }
          }
          EXPECT_TRUE(any) << "tile " << j << " visited for nothing";
          const bool needs = flash::tile_needs_mask(j, t0, rows, s.tokens, s.past, s.window, s.key_tile);
          EXPECT_EQ(needs, !all) << "tile " << j;
          (needs ? masked : unmasked) += 1;
        }
      }
    }
  }
  // Both kinds occur, so both branches above were exercised.
  EXPECT_GT(masked, 0);
  EXPECT_GT(unmasked, 0);
}

TEST(FlashAttentionTiles, HeadSizesPadToAnInstantiation) {
  EXPECT_EQ(flash::padded_head_dim(0), 0);
  EXPECT_EQ(flash::padded_head_dim(1), 64);
  EXPECT_EQ(flash::padded_head_dim(64), 64);
  EXPECT_EQ(flash::padded_head_dim(65), 128);
  EXPECT_EQ(flash::padded_head_dim(80), 128);
  EXPECT_EQ(flash::padded_head_dim(128), 128);
  EXPECT_EQ(flash::padded_head_dim(192), 256);
  EXPECT_EQ(flash::padded_head_dim(256), 256);
  EXPECT_EQ(flash::padded_head_dim(257), 0);
}

// A row that has seen only masked keys keeps a finite base and a zero
// rescale; a real maximum rescales by 2^(m_old - m_new).
TEST(FlashAttentionTiles, OnlineRescaleGuardsRowsThatSawNoKey) {
  const flash::Rescale none = flash::online_rescale(-INFINITY, -INFINITY);
  EXPECT_EQ(none.m_new, -INFINITY);
  EXPECT_EQ(none.base, 0.0f);
  EXPECT_EQ(none.alpha, 0.0f);
  EXPECT_EQ(std::exp2(-INFINITY - none.base), 0.0f);
  const flash::Rescale first = flash::online_rescale(-INFINITY, 3.0f);
  EXPECT_EQ(first.base, 3.0f);
  EXPECT_EQ(first.alpha, 0.0f);
  const flash::Rescale up = flash::online_rescale(1.0f, 3.0f);
  EXPECT_EQ(up.m_new, 3.0f);
  EXPECT_FLOAT_EQ(up.alpha, 0.25f);
  const flash::Rescale same = flash::online_rescale(3.0f, -INFINITY);
  EXPECT_EQ(same.m_new, 3.0f);
  EXPECT_EQ(same.alpha, 1.0f);
  EXPECT_FALSE(std::isnan(flash::log2_score(1.0f, 0.5f, 0.0f, 0.0f, 0, false)));
  EXPECT_EQ(flash::log2_score(1.0f, 0.5f, 0.0f, 0.0f, 0, false), -INFINITY);
}

float to_fp16(float x) { return fp16_to_float(float_to_fp16(x)); }

// The kernel's loop for one head, replayed in float: blocks of `rows`
// queries, their key tiles, masks where tile_needs_mask says, log2 scores,
// online rescaling; out [tokens][head_dim], key0 [tokens]. With `fp16` the
// weights are rounded to fp16 before P V as the kernel rounds them (the
// caller rounds Q, K and V).
void tiled_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                     int tokens, int past, int head_dim, int window, float scale, float softcap, float slope,
                     int rows, int key_tile, std::vector<float>& out, std::vector<float>& key0, bool fp16 = false) {
  const int keys = past + tokens;
  for (int t0 = 0; t0 < tokens; t0 += rows) {
    const flash::TileRange tiles = flash::key_tiles(t0, rows, tokens, past, window, key_tile);
    for (int r = 0; r < rows; ++r) {
      const int t = std::min(t0 + r, tokens - 1);
      float m = -INFINITY, l = 0.0f, key0_score = -INFINITY;
      std::vector<float> o(head_dim, 0.0f);
      for (int j = tiles.begin; j < tiles.end; ++j) {
        const bool masked = flash::tile_needs_mask(j, t0, rows, tokens, past, window, key_tile);
        std::vector<float> s(key_tile);
        float tile_max = -INFINITY;
        for (int i = 0; i < key_tile; ++i) {
          const int key = j * key_tile + i;
          float dot = 0.0f;
          for (int d = 0; d < head_dim && key < keys; ++d) dot += q[t * head_dim + d] * k[key * head_dim + d];
          const bool visible = !masked || flash::key_visible(t, key, past, window);
          s[i] = flash::log2_score(dot, scale, softcap, slope, past + t - key, visible);
          tile_max = std::max(tile_max, s[i]);
        }
        if (j == 0) key0_score = s[0];
        const flash::Rescale step = flash::online_rescale(m, tile_max);
        m = step.m_new;
        l *= step.alpha;
        for (float& x : o) x *= step.alpha;
        for (int i = 0; i < key_tile; ++i) {
          const int key = j * key_tile + i;
          const float p = std::exp2(s[i] - step.base);
          l += p;
          const float p_used = fp16 ? to_fp16(p) : p;
          for (int d = 0; d < head_dim && key < keys; ++d) o[d] += p_used * v[key * head_dim + d];
        }
      }
      if (t0 + r >= tokens) continue;  // a clipped row stores nothing
      for (int d = 0; d < head_dim; ++d) out[t * head_dim + d] = o[d] / l;
      key0[t] = std::exp2(key0_score - m) / l;
    }
  }
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

TEST(FlashAttentionTiles, TheTiledOnlineSoftmaxMatchesTheReference) {
  const int head_dim = 24;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  devices::ReferenceOps ref;
  struct Case {
    int tokens, past, window;
    elementwise::ScoreShaping shaping;
  };
  for (const Case c : {Case{70, 0, 0, {}}, Case{70, 45, 0, {}}, Case{130, 20, 9, {}}, Case{65, 100, 64, {}},
                       Case{90, 30, 0, {0.2f, 0.0f}}, Case{90, 30, 17, {0.0f, 8.0f}}, Case{90, 30, 0, {0.2f, 8.0f}}}) {
    // The kernel's shapes: 128 queries a block by 32 keys (D = 128), 128
    // by 64 (D = 64), 64 by 32 (D = 256).
    for (const auto& [rows, key_tile] : {std::pair{128, 32}, std::pair{128, 64}, std::pair{64, 32}}) {
      const std::string what = "tokens " + std::to_string(c.tokens) + ", past " + std::to_string(c.past) +
                               ", window " + std::to_string(c.window) + ", " + std::to_string(rows) +
                               " queries by " + std::to_string(key_tile) + " keys" +
                               ", softcap " + std::to_string(c.shaping.softcap) + ", alibi " +
                               std::to_string(c.shaping.max_alibi_bias);
      SCOPED_TRACE(what);
      const int keys = c.past + c.tokens;
      const std::vector<float> q = random_floats(std::size_t(c.tokens) * head_dim, 1);
      const std::vector<float> k = random_floats(std::size_t(keys) * head_dim, 2);
      const std::vector<float> v = random_floats(std::size_t(keys) * head_dim, 3);
      // One head of one (head 0's ALiBi slope among 4 heads).
      const float slope = elementwise::alibi_slope(c.shaping.max_alibi_bias, 0, 4);
      std::vector<float> out(q.size()), key0(c.tokens), want(q.size()), want_key0(c.tokens);
      tiled_attention(q, k, v, c.tokens, c.past, head_dim, c.window, scale, c.shaping.softcap, slope, rows, key_tile,
                      out, key0);
      // attention_rows derives head h's slope from max_alibi_bias and `heads`:
      // 4 heads, head 0 of them, with head 0's queries; the other heads unused.
      std::vector<float> q4(std::size_t(c.tokens) * head_dim * 4, 0.0f), out4(q4.size());
      for (int t = 0; t < c.tokens; ++t) {
        std::copy_n(&q[std::size_t(t) * head_dim], head_dim, &q4[std::size_t(t) * head_dim * 4]);
      }
      std::vector<float> key0_4(std::size_t(c.tokens) * 4);
      ref.attention_rows(q4.data(), std::size_t(head_dim) * 4, k.data(), v.data(), head_dim, c.tokens, c.past, 4, 1,
                         head_dim, c.window, scale, c.shaping, out4.data(), std::size_t(head_dim) * 4, {key0_4.data()});
      double worst = 0.0, worst_key0 = 0.0;
      for (int t = 0; t < c.tokens; ++t) {
        for (int d = 0; d < head_dim; ++d) {
          worst = std::max(worst, static_cast<double>(std::fabs(out[t * head_dim + d] - out4[t * head_dim * 4 + d])));
        }
        worst_key0 = std::max(worst_key0, static_cast<double>(std::fabs(key0[t] - key0_4[t])));
      }
      EXPECT_LE(worst, 1e-5) << what;
      EXPECT_LE(worst_key0, 1e-5) << what;
      // Key 0 outside every window: weight 0, the same as the reference's.
      if (c.window > 0) {
        EXPECT_EQ(key0[c.tokens - 1], key0_4[c.tokens - 1]);
      }
    }
  }
}

// The kernel's precision: Q, K, V and the weights rounded to fp16, sums in
// float, at head_dim 128 over 300 keys with the GPU test's inputs (uniform
// in [-1, 1]): within the 5e-3 of the largest reference value that
// device_bodies_test allows the GPU body, with room to spare.
TEST(FlashAttentionTiles, Fp16InputsStayWithinTheGpuTolerance) {
  const int head_dim = 128, tokens = 200, past = 100, keys = past + tokens;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> q = random_floats(std::size_t(tokens) * head_dim, 4);
  std::vector<float> k = random_floats(std::size_t(keys) * head_dim, 5);
  std::vector<float> v = random_floats(std::size_t(keys) * head_dim, 6);
  std::vector<float> want(q.size()), want_key0(tokens);
  devices::ReferenceOps ref;
  ref.attention_rows(q.data(), head_dim, k.data(), v.data(), head_dim, tokens, past, 1, 1, head_dim, 0, scale, {},
                     want.data(), head_dim, {want_key0.data()});
  for (auto* x : {&q, &k, &v}) {
    for (float& e : *x) e = to_fp16(e);
  }
  std::vector<float> out(q.size()), key0(tokens);
  tiled_attention(q, k, v, tokens, past, head_dim, 0, scale, 0.0f, 0.0f, 128, 32, out, key0, true);
  const auto relative = [](const std::vector<float>& a, const std::vector<float>& b) {
    double largest = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      largest = std::max(largest, static_cast<double>(std::fabs(a[i])));
      worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    return worst / largest;
  };
  const double out_error = relative(want, out), key0_error = relative(want_key0, key0);
  std::printf("  fp16 replay: worst |out - reference| %.3g, key 0 %.3g of the largest value\n", out_error,
              key0_error);
  EXPECT_LE(out_error, 1e-3);
  EXPECT_LE(key0_error, 1e-3);
  EXPECT_GT(out_error, 0.0);  // the rounding is there
}

}  // namespace
}  // namespace midtune::engine
