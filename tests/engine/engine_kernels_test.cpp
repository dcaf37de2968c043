// Kernel tests: scalar references against ggml's layouts (via fixtures made by
// tests/reference/make_dequant_fixtures.py) and every compiled fast path
// against its scalar reference on random data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/engine/ops/attention.hpp"
#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/fp16.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/gated_activation.hpp"
#include "backends/engine/ops/matmul.hpp"
#include "backends/engine/ops/packed_matrix.hpp"
#include "backends/engine/ops/quantize_rows.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/rope.hpp"
#include "tests/test_paths.hpp"

namespace midtune::engine {
namespace {

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

TEST(Fp16, KnownValuesAndRoundTrip) {
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7c00)));
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half
    ASSERT_EQ(float_to_fp16(fp16_to_float(static_cast<std::uint16_t>(h))), h) << h;
    ASSERT_EQ(float_to_fp16(-fp16_to_float(static_cast<std::uint16_t>(h))), h | 0x8000u) << h;
  }
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(float_to_fp16(1e6f), 0x7c00);
}

TEST(Dequant, MatchesGgufPythonOnEveryType) {
  std::ifstream in(midtune::testing::source_dir() + "/tests/reference/fixtures/dequant_blocks.json");
  ASSERT_TRUE(in) << "missing fixture dequant_blocks.json";
  const auto fixture = nlohmann::json::parse(in);
  const std::vector<std::pair<std::string, GgmlType>> types = {
      {"F32", GgmlType::F32},   {"F16", GgmlType::F16},   {"BF16", GgmlType::BF16},
      {"Q4_0", GgmlType::Q4_0}, {"Q4_1", GgmlType::Q4_1}, {"Q8_0", GgmlType::Q8_0},
      {"Q4_K", GgmlType::Q4_K}, {"Q6_K", GgmlType::Q6_K}, {"Q5_0", GgmlType::Q5_0},
      {"Q5_1", GgmlType::Q5_1}, {"Q2_K", GgmlType::Q2_K}, {"Q3_K", GgmlType::Q3_K},
      {"Q5_K", GgmlType::Q5_K}, {"IQ4_NL", GgmlType::IQ4_NL}, {"IQ4_XS", GgmlType::IQ4_XS}};
  for (const auto& [name, type] : types) {
    const auto& entry = fixture.at(name);
    const auto bytes = from_hex(entry.at("bytes_hex").get<std::string>());
    const auto expected = entry.at("values").get<std::vector<float>>();
    std::vector<float> got(expected.size());
    dequantize_row(type, bytes.data(), got.data(), got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], expected[i]) << name << " element " << i;  // bit-identical, every type
    }
  }
  std::vector<float> out(16);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_1, nullptr, out.data(), 16), std::invalid_argument);
}

// Random ggml blocks of `type` with sane fp16 scales.
std::vector<std::uint8_t> random_matrix(GgmlType type, int rows, int cols, std::mt19937& rng) {
  const std::size_t row_bytes = cols / block_elements(type) * block_bytes(type);
  std::vector<std::uint8_t> data(rows * row_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : data) b = static_cast<std::uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto put_half = [&](std::size_t off, float v) {
    const std::uint16_t h = float_to_fp16(v);
    data[off] = h & 0xff;
    data[off + 1] = h >> 8;
  };
  const std::size_t bb = block_bytes(type);
  for (std::size_t off = 0; off < data.size(); off += bb) {
    switch (type) {
      case GgmlType::Q4_0: case GgmlType::Q8_0: put_half(off, scale(rng)); break;
      case GgmlType::Q4_1: put_half(off, scale(rng)); put_half(off + 2, -8 * scale(rng)); break;
      case GgmlType::Q4_K: put_half(off, scale(rng)); put_half(off + 2, scale(rng)); break;
      case GgmlType::Q6_K: put_half(off + 208, scale(rng) * 0.1f); break;
      case GgmlType::Q5_0: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: put_half(off, scale(rng) * 0.1f); break;
      case GgmlType::Q5_1: put_half(off, scale(rng)); put_half(off + 2, -16 * scale(rng)); break;
      case GgmlType::Q2_K: put_half(off + 80, scale(rng)); put_half(off + 82, scale(rng)); break;
      case GgmlType::Q3_K: put_half(off + 108, scale(rng) * 0.1f); break;
      case GgmlType::Q5_K: put_half(off, scale(rng)); put_half(off + 2, scale(rng)); break;
      case GgmlType::F16: put_half(off, normal(rng)); break;
      case GgmlType::F32: { const float v = normal(rng); std::memcpy(&data[off], &v, 4); break; }
      case GgmlType::BF16: { const float v = normal(rng); std::uint32_t u; std::memcpy(&u, &v, 4); data[off] = (u >> 16) & 0xff; data[off + 1] = u >> 24; break; }
    }
  }
  return data;
}

class PackTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(PackTest, PackedWeightsReproduceDequantisedRows) {
  std::mt19937 rng(7);
  const GgmlType type = GetParam();
  const int rows = 19, cols = static_cast<int>(block_elements(type) == 256 ? 512 : 96);
  const auto data = random_matrix(type, rows, cols, rng);
  const PackedMatrix packed = pack_matrix(type, data.data(), rows, cols);
  const std::size_t row_bytes = cols / block_elements(type) * block_bytes(type);
  std::vector<float> row(cols);
  const bool exact = type == GgmlType::Q4_0 || type == GgmlType::Q4_1 || type == GgmlType::Q8_0 ||
                     type == GgmlType::Q5_0 || type == GgmlType::Q5_1;
  for (int r = 0; r < rows; ++r) {
    dequantize_row(type, data.data() + r * row_bytes, row.data(), cols);
    for (int c = 0; c < cols; ++c) {
      // Requantised types: half a step of (block range / 255) plus fp16 rounding of d and m.
      float lo = row[c / 32 * 32], hi = lo;
      for (int i = c / 32 * 32; i < c / 32 * 32 + 32; ++i) { lo = std::min(lo, row[i]); hi = std::max(hi, row[i]); }
      // Q4_K / Q5_K keep their values; the sub-block scale and min are
      // rounded to fp16 (relative 2^-11 each).
      float tol = exact ? 1e-6f * std::fabs(row[c]) + 1e-7f
                        : (hi - lo) / 255.0f + 2e-3f * (std::fabs(lo) + std::fabs(hi));
      if (type == GgmlType::Q4_K || type == GgmlType::Q5_K) {
        KSubBlock sub[8];
        k_sub_blocks(type, data.data() + r * row_bytes + c / 256 * block_bytes(type), sub);
        const KSubBlock& sb = sub[c % 256 / 32];
        tol = 0x1p-11f * (std::fabs(sb.scale) * sb.q[c % 32] + std::fabs(sb.min)) * 1.01f + 1e-7f;
      }
      ASSERT_NEAR(packed_weight(packed, r, c), row[c], tol) << "row " << r << " col " << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, PackTest,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::F32,
                                           GgmlType::F16, GgmlType::BF16, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0,
                                           GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K,
                                           GgmlType::IQ4_NL, GgmlType::IQ4_XS));

TEST(QuantizeRows, ErrorIsAtMostHalfAStep) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int rows = 3, cols = 70;  // tail block of 6
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = normal(rng);
  QuantizedRows q;
  quantize_rows(x.data(), rows, cols, cols, q);
  ASSERT_EQ(q.blocks, 3);
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < q.blocks; ++b) {
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int c = b * 32 + i;
        const int qi = q.row_q(r)[c];
        sum += qi;
        if (c < cols) EXPECT_LE(std::fabs(qi * q.row_d(r)[b] - x[r * cols + c]), 0.5f * q.row_d(r)[b] + 1e-6f);
        else EXPECT_EQ(qi, 0);
      }
      EXPECT_FLOAT_EQ(q.row_s(r)[b], q.row_d(r)[b] * sum);
    }
  }
}

// The SIMD quantiser, SwiGLU and GeGLU bodies against scalar: ops_simd_test.cpp.

std::vector<Isa> fast_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::avx2, Isa::avxvnni, Isa::avx512vnni}) {
    if (isa_available(isa)) out.push_back(isa);
  }
  return out;
}

class MatmulTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatmulTest, FastPathsMatchScalarAndScalarMatchesFloat) {
  std::mt19937 rng(11);
  const GgmlType type = GetParam();
  const int n = 37, k = 128, m = 13;  // partial row group, token tile remainder
  const auto data = random_matrix(type, n, k, rng);
  const PackedMatrix w = pack_matrix(type, data.data(), n, k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(m * k);
  for (auto& v : x) v = normal(rng);
  QuantizedRows xq;
  quantize_rows(x.data(), m, k, k, xq);

  std::vector<float> reference(m * n, -1.0f);
  packed_matmul(w, xq, reference.data(), n, Isa::scalar, false);
  // Scalar against float math: the only difference is activation rounding,
  // bounded by sum_k |w| * d_x / 2 per output.
  for (int t = 0; t < m; ++t) {
    for (int o = 0; o < n; ++o) {
      double exact = 0.0, bound = 1e-4;
      for (int c = 0; c < k; ++c) {
        const float wv = packed_weight(w, o, c);
        exact += static_cast<double>(wv) * x[t * k + c];
        bound += 0.5 * std::fabs(wv) * xq.row_d(t)[c / 32];
      }
      ASSERT_NEAR(reference[t * n + o], exact, bound) << "t " << t << " o " << o;
    }
  }
  for (Isa isa : fast_isas()) {
    for (bool parallel : {false, true}) {
      std::vector<float> got(m * n, -1.0f);
      packed_matmul(w, xq, got.data(), n, isa, parallel);
      for (int i = 0; i < m * n; ++i) {
        // Same int32 dots; only float accumulation order differs.
        ASSERT_NEAR(got[i], reference[i], 1e-5f * (1.0f + std::fabs(reference[i]))) << to_string(isa) << " at " << i;
      }
    }
  }
}

// The AVX-VNNI body sums the same int32 dots per block and scales them in
// the AVX2 body's order, so its results are AVX2's bit for bit (a model
// gives the same logits on either path).
TEST_P(MatmulTest, AvxVnniGivesTheAvx2BodysBits) {
  if (!isa_available(Isa::avxvnni)) GTEST_SKIP() << "no AVX-VNNI on this CPU: its body is not run";
  std::mt19937 rng(23);
  const GgmlType type = GetParam();
  const int n = 37, k = 128;
  const auto data = random_matrix(type, n, k, rng);
  const PackedMatrix w = pack_matrix(type, data.data(), n, k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int m : {1, 5, 6, 13}) {  // decode, a partial tile, a whole one, tiles and a remainder
    std::vector<float> x(static_cast<std::size_t>(m) * k);
    for (auto& v : x) v = normal(rng);
    QuantizedRows xq;
    quantize_rows(x.data(), m, k, k, xq);
    std::vector<float> avx2(static_cast<std::size_t>(m) * n), vnni(avx2.size());
    packed_matmul(w, xq, avx2.data(), n, Isa::avx2, false);
    packed_matmul(w, xq, vnni.data(), n, Isa::avxvnni, false);
    for (std::size_t i = 0; i < avx2.size(); ++i) ASSERT_EQ(vnni[i], avx2[i]) << m << " tokens, output " << i;
  }
}

// Full weight bytes at both ends (Q8_0 q = -128 and 127, u = 0 and 255)
// against activations at +-127: the largest int16 pair sums any body forms.
// A body whose int16 sums saturated would be off by thousands of units of
// d_w d_x here; every path must give the scalar body's dots.
TEST(MatmulExtremes, FullBytesAtTheirEndsStayExact) {
  const int n = 32, k = 256, m = 65;  // 65: a lone token after a 64-token chunk
  std::vector<std::uint8_t> data(static_cast<std::size_t>(n) * (k / 32) * block_bytes(GgmlType::Q8_0));
  const std::uint16_t one = float_to_fp16(1.0f);
  for (std::size_t off = 0, blk = 0; off < data.size(); off += block_bytes(GgmlType::Q8_0), ++blk) {
    data[off] = one & 0xff;
    data[off + 1] = one >> 8;
    for (int i = 0; i < 32; ++i) {
      // Row groups of constant 127, constant -128, and alternating runs.
      const int row = static_cast<int>(blk / (k / 32));
      const std::int8_t q = row % 3 == 0 ? 127 : row % 3 == 1 ? -128 : ((i / 2) % 2 == 0 ? 127 : -128);
      data[off + 2 + i] = static_cast<std::uint8_t>(q);
    }
  }
  const PackedMatrix w = pack_matrix(GgmlType::Q8_0, data.data(), n, k);
  std::vector<float> x(static_cast<std::size_t>(m) * k);
  for (int t = 0; t < m; ++t) {
    for (int c = 0; c < k; ++c) x[t * k + c] = t % 3 == 0 ? 1.0f : t % 3 == 1 ? -1.0f : ((c / 2) % 2 == 0 ? 1.0f : -1.0f);
  }
  QuantizedRows xq;
  quantize_rows(x.data(), m, k, k, xq);
  ASSERT_EQ(xq.row_q(0)[0], 127);
  ASSERT_EQ(xq.row_q(1)[0], -127);
  std::vector<float> reference(static_cast<std::size_t>(m) * n);
  packed_matmul(w, xq, reference.data(), n, Isa::scalar, false);
  EXPECT_FLOAT_EQ(reference[0], 127.0f * 127.0f * k * xq.row_d(0)[0]);
  QuantizedRows first;  // one token: the decode body (AVX2: by the activations' digits)
  quantize_rows(x.data(), 1, k, k, first);
  for (Isa isa : fast_isas()) {
    std::vector<float> got(reference.size(), 0.0f);
    for (bool parallel : {false, true}) {  // parallel: chunks of 64 tokens, then the lone one
      packed_matmul(w, xq, got.data(), n, isa, parallel);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], reference[i], 1e-5f * (1.0f + std::fabs(reference[i]))) << to_string(isa) << " at " << i;
      }
    }
    packed_matmul(w, first, got.data(), n, isa, false);
    for (int i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], reference[i], 1e-5f * (1.0f + std::fabs(reference[i]))) << to_string(isa) << " one token, " << i;
    }
  }
}

// add_digits: q = 16 hi + lo for every int8 value, lo in [-8, 7], hi in
// [-8, 8] (the bound the AVX2 one-token body's int16 sums rely on).
TEST(QuantizeRows, DigitsRebuildEveryByteWithinTheirBounds) {
  std::vector<float> x(4 * 64, 1.0f);
  QuantizedRows q;
  quantize_rows(x.data(), 4, 64, 64, q);  // the shape; then every int8 value once
  for (int i = 0; i < 256; ++i) q.q[i] = static_cast<std::int8_t>(i - 128);
  add_digits(q);
  ASSERT_TRUE(q.has_digits);
  std::set<int> seen;
  for (int r = 0; r < 4; ++r) {
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < 32; ++i) {
        const int value = q.row_q(r)[b * 32 + i];
        const int lo = q.row_digits(r)[b * 64 + i];
        const int hi = q.row_digits(r)[b * 64 + 32 + i];
        ASSERT_EQ(16 * hi + lo, value);
        ASSERT_GE(lo, -8);
        ASSERT_LE(lo, 7);
        ASSERT_GE(hi, -8);
        ASSERT_LE(hi, 8);
        seen.insert(value);
      }
    }
  }
  EXPECT_EQ(seen.size(), 256u);
  quantize_rows(x.data(), 1, 64, 64, q);
  EXPECT_FALSE(q.has_digits);  // new q: the old digits no longer apply
}

// The compact layout (packed_matrix.hpp: 5-bit values as nibbles plus a
// plane of fifth bits, Q8_0 / Q5_0 / Q4_0 without their stored m) holds the bytes layout's
// weights exactly, in fewer bytes, and every body that reads it gives the
// bytes layout's products bit for bit (the same int32 dots, scaled in the
// same order): a model's logits do not depend on the layout.
TEST(CompactLayout, SameWeightsFewerBytesSameProducts) {
  std::mt19937 rng(31);
  const int k = 128;
  const auto mixed_q5 = random_matrix(GgmlType::Q5_0, 20, k, rng);
  const auto mixed_q4 = random_matrix(GgmlType::Q4_0, 17, k, rng);
  struct Case {
    std::vector<MatrixPart> parts;
    int bits;  // in the compact layout
    int implied_zero;
    double bytes_ratio;  // compact / bytes
  };
  const auto q4_0 = random_matrix(GgmlType::Q4_0, 37, k, rng);
  const auto q4_1 = random_matrix(GgmlType::Q4_1, 37, k, rng);
  const auto q5_0 = random_matrix(GgmlType::Q5_0, 37, k, rng);
  const auto q5_1 = random_matrix(GgmlType::Q5_1, 37, k, rng);
  const auto q5_k = random_matrix(GgmlType::Q5_K, 37, 256, rng);
  const auto q8_0 = random_matrix(GgmlType::Q8_0, 37, k, rng);
  // Q8_0 rows whose q all lie in [-128, -97] (u <= 31): narrow groups whose
  // m is implied.
  auto q8_0_narrow = random_matrix(GgmlType::Q8_0, 37, k, rng);
  for (std::size_t off = 0; off < q8_0_narrow.size(); off += block_bytes(GgmlType::Q8_0)) {
    for (int i = 0; i < 32; ++i) q8_0_narrow[off + 2 + i] = static_cast<std::uint8_t>(-128 + q8_0_narrow[off + 2 + i] % 32);
  }
  const std::vector<Case> cases = {
      {{{GgmlType::Q4_0, q4_0.data(), 37}}, 4, 8, 288.0 / 320.0},
      {{{GgmlType::Q4_1, q4_1.data(), 37}}, 4, 0, 1.0},
      {{{GgmlType::Q5_0, q5_0.data(), 37}}, 5, 16, 352.0 / 576.0},
      {{{GgmlType::Q5_1, q5_1.data(), 37}}, 5, 0, 384.0 / 576.0},
      {{{GgmlType::Q5_K, q5_k.data(), 37}}, 5, 0, 384.0 / 576.0},
      {{{GgmlType::Q5_0, mixed_q5.data(), 20}, {GgmlType::Q4_0, mixed_q4.data(), 17}}, 5, 0, 384.0 / 576.0},
      {{{GgmlType::Q8_0, q8_0.data(), 37}}, 8, 128, 544.0 / 576.0},
      {{{GgmlType::Q8_0, q8_0_narrow.data(), 37}}, 8, 128, 544.0 / 576.0},
  };
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Case& c : cases) {
    const int cols = c.parts[0].type == GgmlType::Q5_K ? 256 : k;
    const PackedMatrix bytes = pack_matrices(c.parts, cols, PackLayout::bytes);
    const PackedMatrix compact = pack_matrices(c.parts, cols, PackLayout::compact);
    const std::string name = ggml_type_info(c.parts[0].type).name;
    ASSERT_EQ(compact.bits, c.bits) << name;
    ASSERT_EQ(compact.implied_zero, c.implied_zero) << name;
    ASSERT_DOUBLE_EQ(static_cast<double>(compact.data.size()) / bytes.data.size(), c.bytes_ratio) << name;
    ASSERT_EQ(compact.group_max_u, bytes.group_max_u) << name;
    if (&c == &cases.back()) {
      ASSERT_TRUE(compact.narrow(0) && compact.narrow(2)) << "the narrow Q8_0 case";
    }
    for (int r = 0; r < bytes.rows; ++r) {
      for (int col = 0; col < cols; ++col) {
        ASSERT_EQ(packed_weight(compact, r, col), packed_weight(bytes, r, col)) << name << " row " << r << " col " << col;
      }
    }
    for (Isa isa : {Isa::scalar, Isa::avx2}) {
      if (!isa_available(isa)) continue;
      for (int m : {1, 3, 13, 70}) {  // decode, a partial tile, tiles and a remainder, two token chunks
        std::vector<float> x(static_cast<std::size_t>(m) * cols);
        for (auto& v : x) v = normal(rng);
        QuantizedRows xq;
        quantize_rows(x.data(), m, cols, cols, xq);
        std::vector<float> want(static_cast<std::size_t>(m) * bytes.rows), got(want.size());
        packed_matmul(bytes, xq, want.data(), bytes.rows, isa, m > 13);
        packed_matmul(compact, xq, got.data(), bytes.rows, isa, m > 13);
        for (std::size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(got[i], want[i]) << name << " " << to_string(isa) << ", " << m << " tokens, output " << i;
        }
      }
    }
  }
}

// A body that reads only the bytes layout refuses a compact matrix by name
// rather than reading its planes as values.
TEST(CompactLayout, BytesOnlyBodiesRefuseIt) {
  std::mt19937 rng(5);
  const auto data = random_matrix(GgmlType::Q5_0, 16, 64, rng);
  const PackedMatrix compact = pack_matrix(GgmlType::Q5_0, data.data(), 16, 64, PackLayout::compact);
  EXPECT_EQ(packed_layout_for(Isa::scalar), PackLayout::compact);
  for (Isa isa : {Isa::avxvnni, Isa::avx512vnni}) {
    if (!isa_available(isa) || packed_layout_for(isa) == PackLayout::compact) continue;
    std::vector<float> x(64, 1.0f), y(16);
    QuantizedRows xq;
    quantize_rows(x.data(), 1, 64, 64, xq);
    try {
      packed_matmul(compact, xq, y.data(), 16, isa);
      FAIL() << to_string(isa) << " multiplied a compact matrix";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("bytes layout"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PackedForms, MatmulTest,
                         ::testing::Values(GgmlType::Q4_1, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F32));

class AttentionTest : public ::testing::TestWithParam<Isa> {};

TEST_P(AttentionTest, FastPathMatchesScalarIncludingReadouts) {
  const Isa isa = GetParam();
  if (!isa_available(isa)) GTEST_SKIP() << to_string(isa) << " not on this CPU";
  const AttentionFn fast = attention_for(isa);
  ASSERT_NE(fast, attention_scalar()) << "no " << to_string(isa) << " attention body";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int d = 64, keys = 45;
  std::vector<float> kt(d * 48), v(keys * d), q(kAttentionTile * d);
  for (auto& x : kt) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  for (auto& x : q) x = normal(rng);
  const KeyValueView kv{kt.data(), v.data(), static_cast<std::size_t>(d), d};
  for (int count = 1; count <= kAttentionTile; ++count) {
    std::vector<float> out_ref(count * d), out_fast(count * d), probs_ref(count * keys), probs_fast(count * keys);
    std::vector<float> key0_ref(count, -1.0f), key0_fast(count, -2.0f);
    auto make_tile = [&](std::vector<float>& out, std::vector<float>& probs, std::vector<float>& key0) {
      AttentionTile tile;
      tile.count = count;
      tile.key0_weight = key0.data();
      for (int r = 0; r < count; ++r) {
        tile.q[r] = q.data() + r * d;
        tile.out[r] = out.data() + r * d;
        tile.limit[r] = keys - 3 * (count - 1 - r);  // causal rows of different lengths
        tile.probs_out[r] = probs.data() + r * keys;
      }
      return tile;
    };
    std::vector<float> scratch(kAttentionTile * keys);
    attention_scalar()(make_tile(out_ref, probs_ref, key0_ref), kv, 0.125f, scratch.data());
    fast(make_tile(out_fast, probs_fast, key0_fast), kv, 0.125f, scratch.data());
    for (int i = 0; i < count * d; ++i) ASSERT_NEAR(out_fast[i], out_ref[i], 2e-5f) << count << " " << i;
    for (int i = 0; i < count * keys; ++i) ASSERT_NEAR(probs_fast[i], probs_ref[i], 1e-6f) << count << " " << i;
    for (int r = 0; r < count; ++r) {
      ASSERT_NEAR(key0_fast[r], key0_ref[r], 1e-6f) << count << " " << r;
      ASSERT_EQ(key0_ref[r], probs_ref[r * keys]) << "key-0 weight is the row's first entry";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FastPaths, AttentionTest, ::testing::Values(Isa::avx2, Isa::avx512vnni),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(Attention, ScalarIsSoftmaxWeightedValues) {
  // Two keys, one query: hand-computed softmax.
  float kt[kKeyBlock * 2] = {};  // d=2: key0=(1,0), key1=(0,1)
  kt[key_offset(0, 0, 2)] = 1.0f;
  kt[key_offset(1, 1, 2)] = 1.0f;
  const float v[2 * 2] = {1.0f, 2.0f, 3.0f, 4.0f};
  const float q[2] = {2.0f, 0.0f};
  float out[2];
  AttentionTile tile;
  tile.count = 1;
  tile.q[0] = q;
  tile.out[0] = out;
  tile.limit[0] = 2;
  float scratch[kAttentionTile * 2];
  attention_scalar()(tile, KeyValueView{kt, v, 2, 2}, 1.0f, scratch);
  const float p0 = std::exp(2.0f) / (std::exp(2.0f) + 1.0f);
  EXPECT_NEAR(out[0], p0 * 1 + (1 - p0) * 3, 1e-6f);
  EXPECT_NEAR(out[1], p0 * 2 + (1 - p0) * 4, 1e-6f);
}

TEST(Attention, SlidingWindowGivesKeysBeforeFirstZeroWeightOnEveryIsa) {
  // 40 keys of head_dim 16 (the SIMD bodies' shape); keys [first, limit) of
  // a windowed query must give exactly the attention over those keys alone.
  constexpr int kKeys = 40, kDim = 16, kFirst = 29;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> kt(static_cast<std::size_t>((kKeys + 15) / 16) * 16 * kDim), v(kKeys * kDim), q(kDim);
  for (int k = 0; k < kKeys; ++k)
    for (int i = 0; i < kDim; ++i) kt[key_offset(k, i, kDim)] = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : q) x = normal(rng);
  // The same keys moved to the front: the unwindowed reference.
  const int kept = kKeys - kFirst;
  std::vector<float> kt_kept(static_cast<std::size_t>((kept + 15) / 16) * 16 * kDim);
  for (int k = 0; k < kept; ++k)
    for (int i = 0; i < kDim; ++i) kt_kept[key_offset(k, i, kDim)] = kt[key_offset(kFirst + k, i, kDim)];
  float expected[kDim], scratch[kAttentionTile * kKeys];
  AttentionTile plain;
  plain.count = 1;
  plain.q[0] = q.data();
  plain.out[0] = expected;
  plain.limit[0] = kept;
  attention_scalar()(plain, KeyValueView{kt_kept.data(), v.data() + kFirst * kDim, kDim, kDim}, 0.25f, scratch);
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512vnni}) {
    if (!isa_available(isa)) continue;
    float out[kDim], probs[kKeys];
    AttentionTile tile;
    tile.count = 1;
    tile.q[0] = q.data();
    tile.out[0] = out;
    tile.limit[0] = kKeys;
    tile.first[0] = kFirst;
    tile.probs_out[0] = probs;
    attention(attention_for(isa), tile, KeyValueView{kt.data(), v.data(), kDim, kDim}, 0.25f, scratch);
    for (int i = 0; i < kDim; ++i) EXPECT_NEAR(out[i], expected[i], 1e-5f) << to_string(isa);
    for (int k = 0; k < kFirst; ++k) EXPECT_EQ(probs[k], 0.0f) << to_string(isa);
  }
  AttentionTile bad;
  bad.count = 1;
  bad.q[0] = q.data();
  float out[kDim];
  bad.out[0] = out;
  bad.limit[0] = 4;
  bad.first[0] = 4;
  EXPECT_THROW(check_attention_args(bad, KeyValueView{kt.data(), v.data(), kDim, kDim}), std::invalid_argument);
}

TEST(Rope, HalvesPairDimensionIWithIPlusHalf) {
  // NEOX pairing (qwen2, gemma): pair i is (x[i], x[i + d/2]); dimensions
  // from rope_dims on stay as they are.
  float x[6] = {1, 2, 3, 4, 5, 6};
  const float a = 0.3f, b = 1.1f;
  const float cos_sin[4] = {std::cos(a), std::sin(a), std::cos(b), std::sin(b)};
  rope_for(Isa::scalar, RopePairing::halves)(x, cos_sin, 4);
  EXPECT_FLOAT_EQ(x[0], 1 * std::cos(a) - 3 * std::sin(a));
  EXPECT_FLOAT_EQ(x[2], 1 * std::sin(a) + 3 * std::cos(a));
  EXPECT_FLOAT_EQ(x[1], 2 * std::cos(b) - 4 * std::sin(b));
  EXPECT_FLOAT_EQ(x[3], 2 * std::sin(b) + 4 * std::cos(b));
  EXPECT_EQ(x[4], 5.0f);
  EXPECT_EQ(x[5], 6.0f);
  float y[4] = {1, 2, 3, 4};
  rope_for(Isa::scalar, RopePairing::adjacent)(y, cos_sin, 4);
  EXPECT_FLOAT_EQ(y[0], 1 * std::cos(a) - 2 * std::sin(a));
  EXPECT_FLOAT_EQ(y[1], 1 * std::sin(a) + 2 * std::cos(a));
}

TEST(Geglu, IsTanhGeluTimesUp) {
  // ggml_gelu's tanh approximation, in double, at a few points.
  const float gate[5] = {-3.0f, -1.0f, 0.0f, 0.5f, 2.5f};
  const float up[5] = {1.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  float out[5];
  gated_mul_for(FfnActivation::gelu_tanh, Isa::scalar)(gate, up, out, 5);
  for (int i = 0; i < 5; ++i) {
    const double g = gate[i];
    const double gelu = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
    EXPECT_NEAR(out[i], gelu * up[i], 1e-6) << g;
  }
  // Differs from SwiGLU where it should (negative gates).
  float silu[5];
  gated_mul_for(FfnActivation::silu, Isa::scalar)(gate, up, silu, 5);
  EXPECT_GT(std::fabs(out[1] - silu[1]), 0.1f);
}

// By rows, as a device calls it on a fused gate|up product: gate and up rows
// ld_in apart, out rows ld_out apart, nothing outside `width` written; without
// up (mpt's ungated block) the activation alone.
TEST(GatedActivationRows, StridesAndTheUngatedForm) {
  const int rows = 3, width = 5;
  const std::size_t ld_in = 8, ld_out = 7;
  std::vector<float> gate(rows * ld_in), up(rows * ld_in);
  for (std::size_t i = 0; i < gate.size(); ++i) {
    gate[i] = -2.0f + 0.17f * static_cast<float>(i);
    up[i] = 0.5f + 0.03f * static_cast<float>(i);
  }
  for (FfnActivation activation : {FfnActivation::silu, FfnActivation::gelu_tanh}) {
    for (bool gated : {true, false}) {
      std::vector<float> out(rows * ld_out, -7.0f);
      gated_activation_rows(activation, gate.data(), gated ? up.data() : nullptr, ld_in, rows, width, out.data(),
                            ld_out, Isa::scalar);
      for (int r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < ld_out; ++c) {
          const float g = gate[r * ld_in + c], u = gated ? up[r * ld_in + c] : 1.0f;
          const float want = c >= static_cast<std::size_t>(width) ? -7.0f
                             : activation == FfnActivation::silu ? elementwise::silu_mul(g, u)
                                                                  : elementwise::gelu_tanh_mul(g, u);
          EXPECT_EQ(out[r * ld_out + c], want) << r << " " << c << (gated ? " gated" : " ungated");
        }
      }
    }
  }
}

}  // namespace
}  // namespace midtune::engine
