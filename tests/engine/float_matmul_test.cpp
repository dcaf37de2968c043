// The float weight path (ops/float_matrix.hpp, ops/float_matmul.hpp,
// ops/weight_matrix.hpp): stored weights are the file's values bit for bit,
// the scalar reference is an fp32 product, and a weight matrix takes the float
// form exactly when every part is F32 / F16 / BF16. The SIMD bodies against
// this reference: ops_simd_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backends/engine/ops/float_matmul.hpp"
#include "backends/engine/ops/fp16.hpp"
#include "backends/engine/ops/matmul.hpp"
#include "backends/engine/ops/weight_matrix.hpp"

namespace midtune::engine {
namespace {

std::uint16_t to_bf16(float v) {  // round to nearest even
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

struct Source {
  GgmlType type;
  std::vector<std::uint8_t> bytes;
  std::vector<float> values;  // what the bytes hold, as floats
};

Source random_source(GgmlType type, int rows, int cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Source s{type, {}, std::vector<float>(static_cast<std::size_t>(rows) * cols)};
  const std::size_t elem = type == GgmlType::F32 ? 4 : 2;
  s.bytes.resize(s.values.size() * elem);
  for (std::size_t i = 0; i < s.values.size(); ++i) {
    const float v = normal(rng);
    if (type == GgmlType::F32) {
      s.values[i] = v;
      std::memcpy(&s.bytes[i * 4], &v, 4);
    } else {
      const std::uint16_t h = type == GgmlType::F16 ? float_to_fp16(v) : to_bf16(v);
      s.values[i] = type == GgmlType::F16 ? fp16_to_float(h) : bf16_to_float(h);
      std::memcpy(&s.bytes[i * 2], &h, 2);
    }
  }
  return s;
}

TEST(FloatMatrix, HoldsTheStoredWeightsExactlyInTheFormatOfItsParts) {
  std::mt19937 rng(3);
  const int cols = 45;
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    const Source a = random_source(type, 19, cols, rng), b = random_source(type, 6, cols, rng);
    const FloatMatrix m = float_matrices({{type, a.bytes.data(), 19}, {type, b.bytes.data(), 6}}, cols);
    EXPECT_EQ(m.rows, 25);
    EXPECT_EQ(m.groups, 2);
    EXPECT_EQ(m.format, type == GgmlType::F32 ? FloatFormat::f32 : type == GgmlType::F16 ? FloatFormat::f16 : FloatFormat::bf16);
    EXPECT_EQ(m.element_bytes(), type == GgmlType::F32 ? 4u : 2u);
    for (int r = 0; r < 25; ++r) {
      for (int k = 0; k < cols; ++k) {
        const float want = r < 19 ? a.values[r * cols + k] : b.values[(r - 19) * cols + k];
        ASSERT_EQ(m.weight(r, k), want) << ggml_type_info(type).name << " row " << r << " col " << k;
      }
    }
  }
  // A mix of float types is held as fp32, still exact.
  const Source h = random_source(GgmlType::F16, 3, cols, rng), f = random_source(GgmlType::BF16, 2, cols, rng);
  const FloatMatrix mixed = float_matrices({{GgmlType::F16, h.bytes.data(), 3}, {GgmlType::BF16, f.bytes.data(), 2}}, cols);
  EXPECT_EQ(mixed.format, FloatFormat::f32);
  EXPECT_EQ(mixed.weight(1, 7), h.values[cols + 7]);
  EXPECT_EQ(mixed.weight(4, 44), f.values[cols + 44]);
}

TEST(FloatMatrix, RefusesNonFloatPartsAndEmptyOnes) {
  std::vector<std::uint8_t> q8(34 * 2);
  EXPECT_THROW(float_matrices({{GgmlType::Q8_0, q8.data(), 1}}, 64), std::invalid_argument);
  std::vector<std::uint8_t> f(64 * 4);
  EXPECT_THROW(float_matrices({{GgmlType::F32, f.data(), 0}}, 64), std::invalid_argument);
  EXPECT_THROW(float_matrices({}, 64), std::invalid_argument);
}

TEST(FloatMatmul, ScalarReferenceIsTheFp32ProductOfTheStoredWeights) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    const int n = 21, k = 77, m = 3;
    const Source w = random_source(type, n, k, rng);
    const FloatMatrix fm = float_matrices({{type, w.bytes.data(), n}}, k);
    std::vector<float> x(static_cast<std::size_t>(m) * (k + 3));  // row stride above the width
    for (float& v : x) v = normal(rng);
    std::vector<float> y(static_cast<std::size_t>(m) * (n + 2), -1.0f);
    float_matmul(fm, x.data(), m, k + 3, y.data(), n + 2, Isa::scalar);
    for (int t = 0; t < m; ++t) {
      for (int r = 0; r < n; ++r) {
        double want = 0.0, magnitude = 0.0;
        for (int j = 0; j < k; ++j) {
          want += static_cast<double>(w.values[r * k + j]) * x[t * (k + 3) + j];
          magnitude += std::fabs(static_cast<double>(w.values[r * k + j]) * x[t * (k + 3) + j]);
        }
        // fp32 accumulation of k terms: error below k * 2^-24 of the magnitude.
        ASSERT_NEAR(y[t * (n + 2) + r], want, 1e-5 * magnitude) << ggml_type_info(type).name;
      }
      for (int r = n; r < n + 2; ++r) EXPECT_EQ(y[t * (n + 2) + r], -1.0f) << "wrote past the outputs";
    }
  }
}

TEST(FloatMatmul, RejectsBadStrides) {
  std::vector<std::uint8_t> bytes(8 * 16 * 4);
  const FloatMatrix m = float_matrices({{GgmlType::F32, bytes.data(), 8}}, 16);
  std::vector<float> x(64), y(64);
  EXPECT_THROW(float_matmul(m, x.data(), 1, 15, y.data(), 8, Isa::scalar), std::invalid_argument);
  EXPECT_THROW(float_matmul(m, x.data(), 1, 16, y.data(), 7, Isa::scalar), std::invalid_argument);
  EXPECT_THROW(float_matmul(m, x.data(), -1, 16, y.data(), 8, Isa::scalar), std::invalid_argument);
}

TEST(WeightMatrix, FloatPartsKeepTheirPrecisionAndQuantTypesTakeTheInt8Path) {
  std::mt19937 rng(9);
  const int cols = 64;
  const Source f16 = random_source(GgmlType::F16, 16, cols, rng), f32 = random_source(GgmlType::F32, 8, cols, rng);
  const WeightMatrix floats = WeightMatrix::from_parts({{GgmlType::F16, f16.bytes.data(), 16}, {GgmlType::F32, f32.bytes.data(), 8}}, cols);
  ASSERT_TRUE(floats.is_float());
  EXPECT_EQ(floats.rows(), 24);
  EXPECT_EQ(floats.cols(), cols);
  EXPECT_EQ(floats.bytes(), 2u * 16 * cols * 4);  // two groups of 16 fp32 rows

  // One integer part (Q8_0) sends the whole fused matrix to the packed form,
  // and its matmul is quantize_rows + packed_matmul, bit for bit.
  std::vector<std::uint8_t> q8(static_cast<std::size_t>(8) * (cols / 32) * 34);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : q8) b = static_cast<std::uint8_t>(byte(rng));
  for (std::size_t off = 0; off < q8.size(); off += 34) {
    const std::uint16_t d = float_to_fp16(0.01f);
    std::memcpy(&q8[off], &d, 2);
  }
  const std::vector<MatrixPart> mixed = {{GgmlType::F16, f16.bytes.data(), 16}, {GgmlType::Q8_0, q8.data(), 8}};
  const WeightMatrix packed = WeightMatrix::from_parts(mixed, cols);
  ASSERT_FALSE(packed.is_float());
  ASSERT_NE(packed.packed(), nullptr);
  EXPECT_EQ(packed.bytes(), 2u * 2 * (512 + 64));  // 2 groups x 2 blocks x (8-bit quants + scales)
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(3 * cols);
  for (float& v : x) v = normal(rng);
  QuantizedRows scratch, direct;
  std::vector<float> got(3 * 24), want(3 * 24);
  packed.matmul(x.data(), 3, cols, got.data(), 24, scratch, Isa::scalar);
  quantize_rows(x.data(), 3, cols, cols, direct, Isa::scalar);
  const PackedMatrix reference = pack_matrices(mixed, cols);
  packed_matmul(reference, direct, want.data(), 24, Isa::scalar);
  EXPECT_EQ(got, want);
}

// backend.precision: fp32 — the same fused matrix with an integer part takes
// the float form instead: every part dequantised to F32 (the Q8_0 rows hold
// d x q exactly), fp32 activations, so its product is the fp32 product of the
// file's values, not that of int8 activations.
TEST(WeightMatrix, Fp32PrecisionDequantisesEveryPartAndKeepsTheActivationsInFp32) {
  std::mt19937 rng(10);
  const int cols = 64;
  const Source f16 = random_source(GgmlType::F16, 16, cols, rng);
  std::vector<std::uint8_t> q8(static_cast<std::size_t>(8) * (cols / 32) * 34);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : q8) b = static_cast<std::uint8_t>(byte(rng));
  std::vector<float> q8_values(static_cast<std::size_t>(8) * cols);
  for (std::size_t block = 0; block < q8.size() / 34; ++block) {
    const std::uint16_t d = float_to_fp16(0.01f);
    std::memcpy(&q8[block * 34], &d, 2);
    for (int i = 0; i < 32; ++i) {
      q8_values[block * 32 + i] = fp16_to_float(d) * static_cast<float>(static_cast<std::int8_t>(q8[block * 34 + 2 + i]));
    }
  }
  const std::vector<MatrixPart> mixed = {{GgmlType::F16, f16.bytes.data(), 16}, {GgmlType::Q8_0, q8.data(), 8}};
  const WeightMatrix fp32 = WeightMatrix::from_parts(mixed, cols, /*dequantise_to_f32=*/true);
  ASSERT_TRUE(fp32.is_float());
  EXPECT_EQ(fp32.float_form()->format, FloatFormat::f32);
  EXPECT_EQ(fp32.rows(), 24);
  EXPECT_EQ(fp32.bytes(), 2u * 16 * cols * 4);

  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(3 * cols);
  for (float& v : x) v = normal(rng);
  std::vector<float> got(3 * 24), rounded(3 * 24);
  QuantizedRows scratch;
  fp32.matmul(x.data(), 3, cols, got.data(), 24, scratch, Isa::scalar);
  WeightMatrix::from_parts(mixed, cols).matmul(x.data(), 3, cols, rounded.data(), 24, scratch, Isa::scalar);
  double worst = 0.0, worst_int8 = 0.0;
  for (int t = 0; t < 3; ++t) {
    for (int n = 0; n < 24; ++n) {
      const float* w = n < 16 ? &f16.values[static_cast<std::size_t>(n) * cols] : &q8_values[static_cast<std::size_t>(n - 16) * cols];
      double exact = 0.0;
      for (int k = 0; k < cols; ++k) exact += static_cast<double>(w[k]) * x[t * cols + k];
      worst = std::max(worst, std::fabs(got[t * 24 + n] - exact));
      if (n >= 16) worst_int8 = std::max(worst_int8, std::fabs(rounded[t * 24 + n] - exact));
    }
  }
  EXPECT_LT(worst, 1e-4);        // fp32 sums of 64 products
  EXPECT_GT(worst_int8, 10 * worst);  // the default path rounds the activations to int8
}

}  // namespace
}  // namespace midtune::engine
