// The block units the GPU's `file` products read (ops/block_units.hpp) and
// the host reference body of the few-rows product (ops/block_gemv.hpp),
// here on the host: every unit of every block type against dequantize_row
// bit for bit, and block_gemv_host against "dequantise, round to bf16,
// multiply in float" on awkward shapes; and the CUDA kernel's threads
// (block_gemv_body.hpp) run one by one on the host against block_gemv_host.
// The CUDA body itself is checked in device_bodies_test (where there is a
// GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/engine/ops/block_gemv.hpp"
#include "backends/engine/ops/block_gemv_body.hpp"
#include "backends/engine/ops/block_units.hpp"
#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/fp16.hpp"
#include "tests/engine/random_blocks.hpp"

namespace midtune::engine {
namespace {

const std::vector<GgmlType> kBlockTypes = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// |a - b|, a NaN on either side counting as infinitely far (std::max
// would pass a NaN over).
double distance(double a, double b) {
  const double d = std::fabs(a - b);
  return std::isnan(d) ? INFINITY : d;
}

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Every element of a block is read by exactly one unit, with dequantize_row's bits.
TEST(BlockUnits, EveryUnitReadsDequantizeRowsWeights) {
  const std::size_t rows = 3, cols = 512;
  for (const GgmlType type : kBlockTypes) {
    const std::vector<std::uint8_t> data = ::midtune::testing::random_blocks(type, rows, cols, 31);
    const std::size_t elements = block_elements(type), bytes = block_bytes(type);
    std::vector<float> expected(rows * cols);
    for (std::size_t r = 0; r < rows; ++r) {
      dequantize_row(type, data.data() + r * cols / elements * bytes, expected.data() + r * cols, cols);
    }
    const bool known = blocks::with_block_type(static_cast<std::uint32_t>(type), [&](auto tag) {
      constexpr std::uint32_t kType = decltype(tag)::value;
      ASSERT_EQ(blocks::Shape<kType>::kElements, static_cast<int>(elements));
      ASSERT_EQ(blocks::Shape<kType>::kBytes, static_cast<int>(bytes));
      int mismatches = 0;
      for (std::size_t b = 0; b < rows * cols / elements; ++b) {
        std::vector<int> reads(elements, 0);
        for (int u = 0; u < blocks::kUnits<kType>; ++u) {
          float w[blocks::kUnitWeights];
          int first = -1, gap = -1;
          blocks::unit_weights<kType>(data.data() + b * bytes, u, w, first, gap);
          for (int j = 0; j < blocks::kUnitWeights; ++j) {
            const int at = first + j % 4 + (j < 4 ? 0 : gap);
            ASSERT_GE(at, 0);
            ASSERT_LT(at, static_cast<int>(elements));
            ++reads[at];
            if (bits_of(w[j]) != bits_of(expected[b * elements + at])) ++mismatches;
          }
        }
        for (std::size_t e = 0; e < elements; ++e) ASSERT_EQ(reads[e], 1) << ggml_type_info(type).name << " element " << e;
      }
      EXPECT_EQ(mismatches, 0) << ggml_type_info(type).name;
    });
    EXPECT_TRUE(known) << ggml_type_info(type).name;
  }
  EXPECT_FALSE(blocks::with_block_type(static_cast<std::uint32_t>(GgmlType::Q3_K), [](auto) {}));
}

// y = x . w^T with w = bf16(dequantize_row(...)), x in bf16, float sums in
// column order: the tile path's numbers.
std::vector<float> dequantised_product(GgmlType type, const std::vector<std::uint8_t>& w, int outputs, int cols,
                                       const std::vector<std::uint16_t>& x, std::size_t ld_x, int rows,
                                       std::size_t ld_y, std::vector<double>& magnitude) {
  const std::size_t row_bytes = block_bytes(type) * (cols / block_elements(type));
  std::vector<float> wf(static_cast<std::size_t>(outputs) * cols), y(rows * ld_y, 0.0f);
  magnitude.assign(y.size(), 0.0);
  std::vector<float> row(cols);
  for (int o = 0; o < outputs; ++o) {
    dequantize_row(type, w.data() + o * row_bytes, row.data(), cols);
    for (int k = 0; k < cols; ++k) wf[o * cols + k] = bf16_to_float(elementwise::bf16_bits(row[k]));
  }
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < outputs; ++o) {
      float sum = 0.0f;
      double abs_sum = 0.0;
      for (int k = 0; k < cols; ++k) {
        const float p = wf[o * cols + k] * bf16_to_float(x[r * ld_x + k]);
        sum += p;
        abs_sum += std::fabs(p);
      }
      y[r * ld_y + o] = sum;
      magnitude[r * ld_y + o] = abs_sum;
    }
  }
  return y;
}

TEST(BlockGemvHost, MatchesTheDequantisedProductOnAwkwardShapes) {
  for (const GgmlType type : kBlockTypes) {
    for (const int cols : {256, 768}) {
      for (const int outputs : {1, 7, 37}) {
        const std::vector<std::uint8_t> w = ::midtune::testing::random_blocks(type, outputs, cols, 40 + outputs);
        for (const int rows : {1, 3, 17, 32}) {
          const std::size_t ld_x = cols + 8, ld_y = outputs + 3;
          std::mt19937 rng(rows * 100 + cols);
          std::uniform_real_distribution<float> value(-1.0f, 1.0f);
          std::vector<std::uint16_t> x(rows * ld_x);
          for (std::uint16_t& v : x) v = elementwise::bf16_bits(value(rng));
          std::vector<double> magnitude;
          const std::vector<float> expected = dequantised_product(type, w, outputs, cols, x, ld_x, rows, ld_y, magnitude);
          std::vector<float> y(rows * ld_y, -7.0f);  // the padding stays as it is
          const std::size_t row_bytes = block_bytes(type) * (cols / block_elements(type));
          block_gemv_host(static_cast<std::uint32_t>(type), w.data(), row_bytes, outputs, cols, x.data(), ld_x, rows,
                          y.data(), ld_y);
          double worst = 0.0, largest = 0.0;
          for (int r = 0; r < rows; ++r) {
            for (int o = 0; o < static_cast<int>(ld_y); ++o) {
              const std::size_t i = r * ld_y + o;
              if (o >= outputs) {
                ASSERT_EQ(y[i], -7.0f);
                continue;
              }
              // fp32 sums in another order: within a few ulp of the sum of |terms|
              worst = std::max(worst, distance(y[i], expected[i]) / magnitude[i]);
              largest = std::max(largest, magnitude[i]);
            }
          }
          const std::string shape = std::string(ggml_type_info(type).name) + " " + std::to_string(outputs) + "x" +
                                    std::to_string(cols) + ", " + std::to_string(rows) + " rows";
          EXPECT_LE(worst, 1e-5) << shape;
          EXPECT_GT(largest, 10.0) << shape;  // terms of order 1, not zeros
        }
      }
    }
  }
}

// block_gemv_cuda.cu's kernel on the host: every thread block of its grid,
// each phase between two barriers run for every thread in turn (staging,
// then each lane's sums), each warp's lanes summed as the shuffle sums them.
template <std::uint32_t kType, int kRows>
void emulate_kernel(const std::uint8_t* weights, std::size_t row_bytes, int outputs, int cols,
                    const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) {
  constexpr int kOutputs = blocks::kGemvOutputs<kRows>, kThreads = blocks::kGemvWarps * 32;
  const int chunk = blocks::gemv_chunk<kRows>(cols);
  const int grid_x = (outputs + blocks::kGemvWarps * kOutputs - 1) / (blocks::kGemvWarps * kOutputs);
  const int grid_y = (rows + kRows - 1) / kRows;
  std::vector<std::uint16_t> xs(static_cast<std::size_t>(kRows) * chunk);
  for (int by = 0; by < grid_y; ++by) {
    for (int bx = 0; bx < grid_x; ++bx) {
      const int first_row = by * kRows, rows_here = std::min(kRows, rows - first_row);
      std::vector<float> acc(static_cast<std::size_t>(kThreads) * kOutputs * kRows, 0.0f);
      for (int c0 = 0; c0 < cols; c0 += chunk) {
        const int width = std::min(chunk, cols - c0);
        std::fill(xs.begin(), xs.end(), 0xffff);  // what staging leaves unwritten shows as NaN
        for (int t = 0; t < kThreads; ++t) {
          blocks::stage_rows<kRows>(t, kThreads, x, ld_x, first_row, rows_here, c0, width, chunk, xs.data());
        }
        for (int t = 0; t < kThreads; ++t) {
          const int first_output = (bx * blocks::kGemvWarps + t / 32) * kOutputs;
          if (first_output >= outputs) continue;
          const std::uint8_t* w_rows[kOutputs];
          for (int o = 0; o < kOutputs; ++o) w_rows[o] = weights + std::min(first_output + o, outputs - 1) * row_bytes;
          auto* lane_acc = reinterpret_cast<float(*)[kRows]>(acc.data() + static_cast<std::size_t>(t) * kOutputs * kRows);
          blocks::lane_sums<kType, kRows>(w_rows, xs.data(), chunk, c0, width, t % 32, lane_acc);
        }
      }
      for (int warp = 0; warp < blocks::kGemvWarps; ++warp) {
        const int first_output = (bx * blocks::kGemvWarps + warp) * kOutputs;
        for (int o = 0; o < kOutputs; ++o) {
          for (int r = 0; r < kRows; ++r) {
            float lanes[32];
            for (int lane = 0; lane < 32; ++lane) {
              lanes[lane] = acc[(static_cast<std::size_t>(warp * 32 + lane) * kOutputs + o) * kRows + r];
            }
            for (int mask = 16; mask > 0; mask /= 2) {  // warp_sum's butterfly, lane 0's result
              for (int lane = 0; lane < mask; ++lane) lanes[lane] += lanes[lane + mask];
            }
            if (r < rows_here && first_output + o < outputs) y[(first_row + r) * ld_y + first_output + o] = lanes[0];
          }
        }
      }
    }
  }
}

// Every rows-per-pass variant (1, 2, 4, 8, 16 and two passes of 16), a
// thread block's weight rows not filled (7, 37), several thread blocks
// (70), several chunks of x with a short last one (2304 columns at 16 rows
// per pass: 1024 + 1024 + 256; 16640 at one row: 16384 + 256).
TEST(BlockGemvKernelThreads, OnTheHostMatchTheHostBody) {
  struct Case {
    int outputs, cols;
    std::vector<int> rows;
  };
  const std::vector<Case> cases = {{7, 256, {1, 2, 3, 5, 16, 17, 32}},
                                   {37, 768, {1, 3, 17}},
                                   {70, 2304, {2, 17, 32}},
                                   {3, 16640, {1}}};
  for (const GgmlType type : kBlockTypes) {
    for (const Case& c : cases) {
      const std::vector<std::uint8_t> w = ::midtune::testing::random_blocks(type, c.outputs, c.cols, 70 + c.outputs);
      const std::size_t row_bytes = block_bytes(type) * (c.cols / block_elements(type));
      for (const int rows : c.rows) {
        const std::size_t ld_x = c.cols + 8, ld_y = c.outputs + 1;
        std::mt19937 rng(rows * 7 + c.cols);
        std::uniform_real_distribution<float> value(-1.0f, 1.0f);
        std::vector<std::uint16_t> x(rows * ld_x);
        for (std::uint16_t& v : x) v = elementwise::bf16_bits(value(rng));
        std::vector<float> expected(rows * ld_y, -7.0f), y(rows * ld_y, -7.0f);
        block_gemv_host(static_cast<std::uint32_t>(type), w.data(), row_bytes, c.outputs, c.cols, x.data(), ld_x,
                        rows, expected.data(), ld_y);
        blocks::with_block_type(static_cast<std::uint32_t>(type), [&](auto tag) {
          blocks::with_rows_per_pass(rows, [&](auto rows_per_pass) {
            emulate_kernel<decltype(tag)::value, decltype(rows_per_pass)::value>(
                w.data(), row_bytes, c.outputs, c.cols, x.data(), ld_x, rows, y.data(), ld_y);
          });
        });
        double worst = 0.0, largest = 0.0;
        for (std::size_t i = 0; i < y.size(); ++i) {
          worst = std::max(worst, distance(y[i], expected[i]));
          largest = std::max(largest, std::fabs(static_cast<double>(expected[i])));
        }
        const std::string shape = std::string(ggml_type_info(type).name) + " " + std::to_string(c.outputs) + "x" +
                                  std::to_string(c.cols) + ", " + std::to_string(rows) + " rows";
        EXPECT_LE(worst, 1e-4 * largest) << shape;  // fp32 sums against double; the padding equal (-7)
      }
    }
  }
}

TEST(BlockGemvHost, RefusesWhatItCannotRead) {
  const std::vector<std::uint8_t> w = ::midtune::testing::random_blocks(GgmlType::Q4_K, 2, 256, 1);
  std::vector<std::uint16_t> x(256);
  std::vector<float> y(2);
  EXPECT_THROW(block_gemv_host(static_cast<std::uint32_t>(GgmlType::Q3_K), w.data(), 144, 2, 256, x.data(), 256, 1,
                               y.data(), 2),
               std::invalid_argument);
  EXPECT_THROW(block_gemv_host(static_cast<std::uint32_t>(GgmlType::Q4_K), w.data(), 144, 2, 128, x.data(), 256, 1,
                               y.data(), 2),
               std::invalid_argument);  // half a block
  EXPECT_THROW(block_gemv_host(static_cast<std::uint32_t>(GgmlType::Q4_K), w.data(), 100, 2, 256, x.data(), 256, 1,
                               y.data(), 2),
               std::invalid_argument);  // rows shorter than their blocks
}

}  // namespace
}  // namespace midtune::engine
