// Every op's body for each SIMD ISA against the same op's scalar reference
// on random data (as llm.c's dev/cuda checks each kernel against the CPU
// one), for every ISA this CPU runs; the others are skipped with a message.
// An ISA without its own body for an op runs a lower one (ops/dispatch.hpp),
// which then must match exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "backends/engine/ops/attention.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/float_matmul.hpp"
#include "backends/engine/ops/fp16.hpp"
#include "backends/engine/ops/gated_activation.hpp"
#include "backends/engine/ops/matmul.hpp"
#include "backends/engine/ops/packed_matrix.hpp"
#include "backends/engine/ops/quantize_rows.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/rope.hpp"

namespace midtune::engine {
namespace {

class OpsSimd : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_available(GetParam())) GTEST_SKIP() << to_string(GetParam()) << " is not on this CPU: its bodies are not run";
  }
  std::mt19937 rng{17};
  std::normal_distribution<float> normal{0.0f, 2.0f};
  std::vector<float> random(std::size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
  }
};

TEST_P(OpsSimd, MatmulMatchesScalar) {
  const int n = 37, k = 96, m = 11;  // partial row group, token tile remainder
  const std::vector<float> w_data = random(static_cast<std::size_t>(n) * k);
  const PackedMatrix w = pack_matrix(GgmlType::F32, w_data.data(), n, k);
  const std::vector<float> x = random(static_cast<std::size_t>(m) * k);
  QuantizedRows xq;
  quantize_rows(x.data(), m, k, k, xq);
  std::vector<float> ref(m * n), got(m * n);
  packed_matmul(w, xq, ref.data(), n, Isa::scalar, false);
  packed_matmul(w, xq, got.data(), n, GetParam(), false);
  // Same int32 dots; only the float accumulation order may differ.
  for (int i = 0; i < m * n; ++i) ASSERT_NEAR(got[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i]))) << i;
}

// The int16 steps of the AVX2 body (vpmaddubsw pair sums) are exact only
// within bounds its nibble split keeps, and the AVX-VNNI body takes 8-bit
// bytes whole into int32 lanes; weights at the ends of their range
// (u = 0 / 255 for 8-bit, 0 / 15 for 4-bit) against activations of +-127
// find a step that overflows. Token counts 1..9 cover the register tiles
// and their remainders; 37 rows a partial group and a partial half.
TEST_P(OpsSimd, MatmulIsExactAtTheInt8Extremes) {
  const int n = 37, k = 128;
  std::bernoulli_distribution coin(0.5);
  // 8-bit: F32 rows of -1 / +1 requantise to u = 0 / 255 (m = -1, d = 2 / 255).
  std::vector<float> w8(static_cast<std::size_t>(n) * k);
  for (std::size_t i = 0; i < w8.size(); ++i) w8[i] = i < w8.size() / 2 || coin(rng) ? 1.0f : -1.0f;
  // 4-bit: Q4_1 blocks (d = 1, m = 0) whose nibbles are 0 or 15.
  std::vector<std::uint8_t> w4;
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < k / 32; ++b) {
      const std::uint16_t d = float_to_fp16(1.0f), m = 0;
      w4.push_back(static_cast<std::uint8_t>(d & 0xff));
      w4.push_back(static_cast<std::uint8_t>(d >> 8));
      w4.push_back(static_cast<std::uint8_t>(m & 0xff));
      w4.push_back(static_cast<std::uint8_t>(m >> 8));
      for (int i = 0; i < 16; ++i) w4.push_back(r < n / 2 || coin(rng) ? 0xff : (coin(rng) ? 0x0f : 0xf0));
    }
  }
  // 5-bit: Q5_1 blocks (d = 1, m = 0) whose values are 0 or 31, kept whole
  // in narrow groups; under Q8_0 rows packed below them (one matmul, as Q, K
  // and V are), the groups holding Q8_0 rows take the nibble split.
  std::vector<std::uint8_t> w5;
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < k / 32; ++b) {
      const std::uint16_t d = float_to_fp16(1.0f), m = 0;
      for (std::uint16_t h : {d, m}) {
        w5.push_back(static_cast<std::uint8_t>(h & 0xff));
        w5.push_back(static_cast<std::uint8_t>(h >> 8));
      }
      for (int i = 0; i < 4; ++i) w5.push_back(r < n / 2 ? 0xff : static_cast<std::uint8_t>(coin(rng) ? 0xff : 0x00));
      for (int i = 0; i < 16; ++i) w5.push_back(r < n / 2 || coin(rng) ? 0xff : (coin(rng) ? 0x0f : 0xf0));
    }
  }
  std::vector<std::uint8_t> w8_exact;  // Q8_0 blocks (d = 1) of -128 / 127: u = 0 / 255
  for (int r = 0; r < n - 32; ++r) {
    for (int b = 0; b < k / 32; ++b) {
      const std::uint16_t d = float_to_fp16(1.0f);
      w8_exact.push_back(static_cast<std::uint8_t>(d & 0xff));
      w8_exact.push_back(static_cast<std::uint8_t>(d >> 8));
      for (int i = 0; i < 32; ++i) w8_exact.push_back(coin(rng) ? 0x80 : 0x7f);
    }
  }
  const PackedMatrix forms[] = {
      pack_matrix(GgmlType::F32, w8.data(), n, k), pack_matrix(GgmlType::Q4_1, w4.data(), n, k),
      pack_matrices({{GgmlType::Q5_1, w5.data(), 32}, {GgmlType::Q8_0, w8_exact.data(), n - 32}}, k)};
  ASSERT_EQ(forms[0].bits, 8);
  ASSERT_EQ(forms[1].bits, 4);
  ASSERT_EQ(forms[2].bits, 8);
  ASSERT_FALSE(forms[0].narrow(2));  // random rows (the first half is constant: u = 0)
  ASSERT_TRUE(forms[2].narrow(0) && forms[2].narrow(1));
  ASSERT_FALSE(forms[2].narrow(2));
  ASSERT_EQ(forms[2].group_max_u[0], 31);
  // The compact layout (packed_matrix.hpp) of the same extremes: 5-bit
  // values as nibbles and fifth bits, joined in registers by the decode
  // path (its int16 sums run two chunks), and Q8_0 with m = -128 d implied.
  const PackedMatrix compact_forms[] = {pack_matrix(GgmlType::Q5_1, w5.data(), n, k, PackLayout::compact),
                                        pack_matrix(GgmlType::Q8_0, w8_exact.data(), n - 32, k, PackLayout::compact)};
  ASSERT_EQ(compact_forms[0].bits, 5);
  ASSERT_EQ(compact_forms[0].group_max_u[0], 31);
  ASSERT_EQ(compact_forms[1].implied_zero, 128);
  std::vector<const PackedMatrix*> checked;
  for (const PackedMatrix& w : forms) checked.push_back(&w);
  if (packed_layout_for(GetParam()) == PackLayout::compact) {
    for (const PackedMatrix& w : compact_forms) checked.push_back(&w);
  }
  for (const PackedMatrix* form : checked) {
    const PackedMatrix& w = *form;
    for (int m = 1; m <= 9; ++m) {
      std::vector<float> x(static_cast<std::size_t>(m) * k);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = i % 5 == 0 || coin(rng) ? 3.0f : -3.0f;  // q = +-127
      QuantizedRows xq;
      quantize_rows(x.data(), m, k, k, xq);
      std::vector<float> ref(static_cast<std::size_t>(m) * n), got(ref.size());
      packed_matmul(w, xq, ref.data(), n, Isa::scalar, false);
      packed_matmul(w, xq, got.data(), n, GetParam(), false);
      for (std::size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(got[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i]))) << w.bits << "-bit, " << m << " tokens, " << i;
      }
    }
  }
}

TEST_P(OpsSimd, FloatMatmulMatchesScalarForEveryFormatAndTail) {
  // rows: partial and whole 16-row groups; cols: below, at and past 32-wide
  // multiples and past the 4-way decode split; tokens: one (decode), a
  // remainder past whole prefill sub-tiles (6 on AVX2, 12 on AVX-512), many;
  // 130 rows: whole 4- and 8-group decode blocks plus a remainder.
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (const auto& [n, k] : {std::pair{37, 96}, std::pair{16, 71}, std::pair{5, 3}, std::pair{50, 33}, std::pair{130, 40}}) {
      std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n) * k * (type == GgmlType::F32 ? 4 : 2));
      const std::vector<float> values = random(static_cast<std::size_t>(n) * k);
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (type == GgmlType::F32) {
          std::memcpy(&bytes[i * 4], &values[i], 4);
        } else {
          std::uint32_t bits;
          std::memcpy(&bits, &values[i], 4);
          const std::uint16_t h = type == GgmlType::F16 ? float_to_fp16(values[i] * 0.25f)
                                                         : static_cast<std::uint16_t>(bits >> 16);
          std::memcpy(&bytes[i * 2], &h, 2);
        }
      }
      const FloatMatrix w = float_matrices({{type, bytes.data(), n}}, k);
      for (int m : {1, 13, 70}) {
        const std::vector<float> x = random(static_cast<std::size_t>(m) * k);
        std::vector<float> ref(static_cast<std::size_t>(m) * n), got(ref.size());
        float_matmul(w, x.data(), m, k, ref.data(), n, Isa::scalar, false);
        float_matmul(w, x.data(), m, k, got.data(), n, GetParam(), m > 13);  // also the oneTBB split
        for (int t = 0; t < m; ++t) {
          for (int r = 0; r < n; ++r) {
            float magnitude = 0.0f;
            for (int j = 0; j < k; ++j) magnitude += std::fabs(w.weight(r, j) * x[t * k + j]);
            // Same fp32 products; only the summation order differs: each
            // side's rounding error is below k * 2^-24 of the magnitude. BF16
            // weights under avx512bf16 also round the activations to bf16
            // (relative 2^-8 each: 8 significant bits).
            const bool bf16_products = type == GgmlType::BF16 && GetParam() == Isa::avx512bf16;
            const float tolerance = (bf16_products ? 0x1p-8f : 0.0f) + 2.0f * k * 0x1p-24f;
            ASSERT_NEAR(got[t * n + r], ref[t * n + r], tolerance * magnitude)
                << ggml_type_info(type).name << " n " << n << " k " << k << " m " << m << " t " << t << " r " << r;
          }
        }
      }
    }
  }
}

TEST_P(OpsSimd, AttentionMatchesScalar) {
  // d 40: not a multiple of 16, the SIMD bodies hand it to scalar; 300
  // keys: p V over three key chunks (kValueKeyChunk), summed apart.
  for (const auto& [head_dim, key_count] : {std::pair{64, 37}, std::pair{40, 37}, std::pair{64, 300}}) {
    // Plain copies: the lambda below captures them (a structured binding is
    // not capturable before clang 16, which builds the sanitizer tree).
    const int d = head_dim, keys = key_count;
    const int key_blocks = (keys + kKeyBlock - 1) / kKeyBlock;
    const std::vector<float> kt = random(static_cast<std::size_t>(d) * kKeyBlock * key_blocks),
                             v = random(static_cast<std::size_t>(keys) * d),
                             q = random(static_cast<std::size_t>(kAttentionTile) * d);
    const KeyValueView kv{kt.data(), v.data(), static_cast<std::size_t>(d), d};
    for (int count = 1; count <= kAttentionTile; ++count) {
      std::vector<float> out_ref(count * d), out_got(count * d), p_ref(count * keys), p_got(count * keys);
      auto tile_for = [&](std::vector<float>& out, std::vector<float>& probs) {
        AttentionTile tile;
        tile.count = count;
        for (int r = 0; r < count; ++r) {
          tile.q[r] = q.data() + r * d;
          tile.out[r] = out.data() + r * d;
          tile.limit[r] = keys - 2 * (count - 1 - r);
          tile.probs_out[r] = probs.data() + r * keys;
        }
        return tile;
      };
      std::vector<float> scratch(kAttentionTile * keys);
      attention(attention_scalar(), tile_for(out_ref, p_ref), kv, 0.125f, scratch.data());
      attention(attention_for(GetParam()), tile_for(out_got, p_got), kv, 0.125f, scratch.data());
      for (int i = 0; i < count * d; ++i) ASSERT_NEAR(out_got[i], out_ref[i], 2e-5f) << "d " << d << " count " << count;
      for (int i = 0; i < count * keys; ++i) ASSERT_NEAR(p_got[i], p_ref[i], 1e-6f) << "d " << d << " count " << count;
    }
  }
}

// The model runs a decode step's tiles in parts (keys split for the scores
// and, in chunks, for p V) when threads would idle: the parts must give the
// whole body's outputs and readouts bit for bit, over any split.
TEST_P(OpsSimd, AttentionPartsGiveTheBodysResultsBitForBit) {
  const AttentionParts* parts = attention_parts_for(GetParam());
  ASSERT_NE(parts, nullptr);
  const int d = 64, keys = 293;
  const std::vector<float> kt = random(static_cast<std::size_t>(d) * 304), v = random(static_cast<std::size_t>(keys) * d),
                           q = random(static_cast<std::size_t>(kAttentionTile) * d);
  const KeyValueView kv{kt.data(), v.data(), static_cast<std::size_t>(d), d};
  for (int count : {1, 3, 7, 12}) {
    for (int window : {0, 100}) {
      struct Result {
        std::vector<float> out, probs, key0;
      };
      auto tile_for = [&](Result& res) {
        res.out.assign(count * d, -1.0f);
        res.probs.assign(count * keys, -1.0f);
        res.key0.assign(count, -1.0f);
        AttentionTile tile;
        tile.count = count;
        for (int r = 0; r < count; ++r) {
          tile.q[r] = q.data() + r * d;
          tile.out[r] = res.out.data() + r * d;
          tile.limit[r] = keys - (count - 1 - r);
          tile.first[r] = window == 0 ? 0 : tile.limit[r] - window;
          tile.probs_out[r] = res.probs.data() + r * keys;
        }
        tile.key0_weight = res.key0.data();
        return tile;
      };
      Result whole, split;
      std::vector<float> scratch(kAttentionTile * keys);
      attention(attention_for(GetParam()), tile_for(whole), kv, 0.125f, scratch.data());
      for (int key_chunk : {16, 48, 512}) {
        const AttentionTile tile = tile_for(split);
        std::fill(scratch.begin(), scratch.end(), 7.0f);
        for (int k = 0; k < keys; k += key_chunk) parts->scores(tile, kv, 0.125f, scratch.data(), keys, k, std::min(keys, k + key_chunk));
        for (int r = 0; r < count; ++r) parts->softmax_row(tile, r, scratch.data(), keys);
        const int chunks = (keys + kValueKeyChunk - 1) / kValueKeyChunk;
        const std::size_t chunk_stride = static_cast<std::size_t>(count) * d + 3;  // any stride that fits
        std::vector<float> partials(chunks * chunk_stride, 7.0f);
        for (int j = chunks - 1; j >= 0; --j) {  // any order
          parts->values(tile, kv, scratch.data(), keys, j * kValueKeyChunk, std::min(keys, (j + 1) * kValueKeyChunk),
                        partials.data() + j * chunk_stride);
        }
        add_value_chunks(tile, partials.data(), chunks, d, chunk_stride);
        ASSERT_EQ(0, std::memcmp(whole.out.data(), split.out.data(), sizeof(float) * whole.out.size())) << count << " " << key_chunk;
        ASSERT_EQ(0, std::memcmp(whole.probs.data(), split.probs.data(), sizeof(float) * whole.probs.size())) << count;
        ASSERT_EQ(0, std::memcmp(whole.key0.data(), split.key0.data(), sizeof(float) * whole.key0.size())) << count;
      }
    }
  }
}

// A bf16 cache (backend.kv_cache: bf16) is read as the exact floats of its
// bits: every body, whole or in its decode parts, gives over it the bits it
// gives over an fp32 cache holding those rounded values.
TEST_P(OpsSimd, AttentionOverABf16CacheIsTheFp32BodyOverItsRoundedValues) {
  const AttentionParts* parts = attention_parts_for(GetParam());
  ASSERT_NE(parts, nullptr);
  const int d = 64, keys = 293;
  const std::size_t key_floats = static_cast<std::size_t>(d) * 304, value_floats = static_cast<std::size_t>(keys) * d;
  std::vector<float> kt = random(key_floats), v = random(value_floats);
  std::vector<std::uint16_t> kt_bits(key_floats), v_bits(value_floats);
  for (std::size_t i = 0; i < key_floats; ++i) {
    kt_bits[i] = elementwise::bf16_bits(kt[i]);
    kt[i] = elementwise::bf16_value(kt_bits[i]);
  }
  for (std::size_t i = 0; i < value_floats; ++i) {
    v_bits[i] = elementwise::bf16_bits(v[i]);
    v[i] = elementwise::bf16_value(v_bits[i]);
  }
  const std::vector<float> q = random(static_cast<std::size_t>(kAttentionTile) * d);
  const KeyValueView fp32{kt.data(), v.data(), static_cast<std::size_t>(d), d};
  KeyValueView bf16;
  bf16.kt_bf16 = kt_bits.data();
  bf16.v_bf16 = v_bits.data();
  bf16.v_ld = static_cast<std::size_t>(d);
  bf16.head_dim = d;
  const int count = 5;
  auto run = [&](const KeyValueView& kv, AttentionFn body, bool in_parts) {
    std::vector<float> out(count * d, -1.0f), scratch(kAttentionTile * keys);
    AttentionTile tile;
    tile.count = count;
    for (int r = 0; r < count; ++r) {
      tile.q[r] = q.data() + r * d;
      tile.out[r] = out.data() + r * d;
      tile.limit[r] = keys - r;
    }
    if (!in_parts) {
      attention(body, tile, kv, 0.125f, scratch.data());
      return out;
    }
    parts->scores(tile, kv, 0.125f, scratch.data(), keys, 0, keys);
    for (int r = 0; r < count; ++r) parts->softmax_row(tile, r, scratch.data(), keys);
    const int chunks = (keys + kValueKeyChunk - 1) / kValueKeyChunk;
    const std::size_t chunk_stride = static_cast<std::size_t>(count) * d;
    std::vector<float> partials(chunks * chunk_stride);
    for (int j = 0; j < chunks; ++j) {
      parts->values(tile, kv, scratch.data(), keys, j * kValueKeyChunk, std::min(keys, (j + 1) * kValueKeyChunk),
                    partials.data() + j * chunk_stride);
    }
    add_value_chunks(tile, partials.data(), chunks, d, chunk_stride);
    return out;
  };
  for (AttentionFn body : {attention_scalar(), attention_for(GetParam())}) {
    EXPECT_EQ(run(bf16, body, false), run(fp32, body, false)) << (body == attention_scalar() ? "scalar" : "simd");
  }
  EXPECT_EQ(run(bf16, nullptr, true), run(fp32, nullptr, true)) << "parts";
  EXPECT_EQ(run(bf16, nullptr, true), run(fp32, attention_for(GetParam()), false)) << "parts vs body";
  // One form at a time: a view with both, or with keys of one and values of
  // the other, is refused.
  KeyValueView mixed = fp32;
  mixed.v_bf16 = v_bits.data();
  AttentionTile tile;
  tile.count = 1;
  std::vector<float> out(d), scratch(kAttentionTile * keys);
  tile.q[0] = q.data();
  tile.out[0] = out.data();
  tile.limit[0] = keys;
  EXPECT_THROW(attention(attention_scalar(), tile, mixed, 0.125f, scratch.data()), std::invalid_argument);
}

TEST_P(OpsSimd, QuantizeRowsIsBitIdenticalToScalar) {
  for (int cols : {96, 70}) {  // 70: a tail block, handed to the scalar body
    const int rows = 5;
    std::vector<float> x = random(static_cast<std::size_t>(rows) * cols);
    std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero block
    QuantizedRows a, b;
    quantize_rows(x.data(), rows, cols, cols, a, Isa::scalar);
    quantize_rows(x.data(), rows, cols, cols, b, GetParam());
    for (int i = 0; i < rows * a.blocks * kQuantBlock; ++i) ASSERT_EQ(a.q[i], b.q[i]) << cols << " " << i;
    for (int i = 0; i < rows * a.blocks; ++i) {
      ASSERT_EQ(a.d[i], b.d[i]) << cols << " " << i;
      ASSERT_EQ(a.s[i], b.s[i]) << cols << " " << i;
    }
  }
}

TEST_P(OpsSimd, SwigluMatchesScalar) {
  const std::size_t n = 77;  // a partial vector at the end
  std::vector<float> g = random(n), u = random(n), ref(n), got(n);
  g[0] = -100.0f;  // exp overflow side
  g[1] = 100.0f;
  gated_mul_for(FfnActivation::silu, Isa::scalar)(g.data(), u.data(), ref.data(), n);
  gated_mul_for(FfnActivation::silu, GetParam())(g.data(), u.data(), got.data(), n);
  // Polynomial exp: ~1e-7 relative.
  for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 1e-6f * (1.0f + std::fabs(ref[i]))) << i;
}

// GeGLU's SIMD body computes gelu as g / (1 + exp(-2u)) rather than with
// tanh: the same function, checked across the range Gemma's gates take and
// at both saturated ends.
TEST_P(OpsSimd, GegluMatchesScalar) {
  const std::size_t n = 301;  // a partial vector at the end
  std::vector<float> g(n), u = random(n), ref(n), got(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = -15.0f + 30.0f * static_cast<float>(i) / static_cast<float>(n - 1);
  g[0] = -100.0f;
  g[1] = 100.0f;
  g[2] = 0.0f;
  g[3] = 1e-6f;
  gated_mul_for(FfnActivation::gelu_tanh, Isa::scalar)(g.data(), u.data(), ref.data(), n);
  gated_mul_for(FfnActivation::gelu_tanh, GetParam())(g.data(), u.data(), got.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(got[i], ref[i], 2e-6f * (1.0f + std::fabs(ref[i]))) << "gate " << g[i];
  }
  EXPECT_NEAR(got[0], 0.0f, 1e-30f);  // the exp clamps at 88.3: g / 2e38, not 0
  EXPECT_FLOAT_EQ(got[1], 100.0f * u[1]);
}

TEST_P(OpsSimd, RmsnormAndRopeMatchScalar) {
  const int rows = 3, width = 50;
  const std::vector<float> x = random(rows * width), w = random(width);
  std::vector<float> ref(rows * width), got(rows * width);
  rms_norm_rows(x.data(), width, w.data(), rows, width, 1e-5f, ref.data(), width, Isa::scalar);
  rms_norm_rows(x.data(), width, w.data(), rows, width, 1e-5f, got.data(), width, GetParam());
  EXPECT_EQ(got, ref);
  std::vector<float> a = random(64), b = a, cos_sin = random(64);
  rope_for(Isa::scalar)(a.data(), cos_sin.data(), 64);
  rope_for(GetParam())(b.data(), cos_sin.data(), 64);
  EXPECT_EQ(a, b);
}

TEST(Bf16Products, AreTheProductsOfBf16RoundedActivationsSummedInFp32) {
  if (!isa_available(Isa::avx512bf16)) GTEST_SKIP() << "avx512bf16 is not on this CPU: its body is not run";
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Odd and even column counts (a padded last pair), a partial row group,
  // decode (1 token), a prefill remainder (13 = 12 + 1) and many tokens.
  for (const auto& [n, k] : {std::pair{37, 96}, std::pair{16, 71}, std::pair{5, 3}, std::pair{130, 40}}) {
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(n) * k);
    for (auto& b : bits) b = elementwise::bf16_bits(normal(rng));
    const FloatMatrix w = float_matrices({{GgmlType::BF16, bits.data(), n}}, k);
    for (int m : {1, 13, 70}) {
      std::vector<float> x(static_cast<std::size_t>(m) * (k + 1));  // stride above the width
      for (float& v : x) v = normal(rng);
      std::vector<float> got(static_cast<std::size_t>(m) * n), one(static_cast<std::size_t>(n));
      float_matmul(w, x.data(), m, k + 1, got.data(), n, Isa::avx512bf16, m > 13);
      for (int t = 0; t < m; ++t) {
        for (int r = 0; r < n; ++r) {
          double want = 0.0, magnitude = 0.0;
          for (int j = 0; j < k; ++j) {
            const double product = static_cast<double>(bf16_to_float(bits[r * k + j])) *
                                   bf16_to_float(elementwise::bf16_bits(x[t * (k + 1) + j]));
            want += product;
            magnitude += std::fabs(product);
          }
          // Exact products (bf16 x bf16 fits fp32), fp32 sums only.
          ASSERT_NEAR(got[t * n + r], want, 2.0 * k * 0x1p-24 * magnitude) << "n " << n << " k " << k << " t " << t;
        }
        // A token alone (the decode kernel) gives the same bits as in a batch.
        float_matmul(w, x.data() + t * (k + 1), 1, k + 1, one.data(), n, Isa::avx512bf16, false);
        for (int r = 0; r < n; ++r) ASSERT_EQ(one[r], got[t * n + r]) << "token " << t << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, OpsSimd, ::testing::Values(Isa::avx2, Isa::avxvnni, Isa::avx512vnni, Isa::avx512bf16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace midtune::engine
