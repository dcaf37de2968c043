// Every CUDA op body against its CPU reference, on the same random inputs
// (ggml's test-backend-ops, for midtune's ops). Where the build has no CUDA or
// the machine no device, each test reports itself skipped with the reason, so
// a machine without a GPU passes the suite honestly.
//
// Tolerances (relative to the output's magnitude, float32 data): RMSNorm and
// RoPE 1e-6 (the same float expressions; only the double-precision sum's order
// and the device's cos/sin differ), SwiGLU and GeGLU 1e-6 (the device's expf
// and tanhf are within 2 ulp of the host's), the bf16 matrix product 1e-5 of
// the largest output against a double sum of the same bf16 values (fp32
// accumulation), attention 1e-5 (float sums over
// up to 1300 keys in another order, a running maximum instead of the exact one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "backends/engine/cuda/devices.hpp"
#include "backends/engine/ops/attention.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/fp16.hpp"
#include "backends/engine/ops/geglu.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/rope.hpp"
#include "backends/engine/ops/swiglu.hpp"

#if defined(MIDTUNE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "backends/engine/ops/cuda_ops.hpp"
#endif

namespace midtune::engine {
namespace {

#if defined(MIDTUNE_WITH_CUDA)

std::vector<float> random_floats(std::size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Worst |a - b| / max(1, |b|).
double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::fabs(double(b[i]))));
  }
  return worst;
}

// A device copy of a host vector, freed on scope exit.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : size_(host.size()) {
    void* memory = nullptr;
    if (cudaMalloc(&memory, bytes()) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    data_ = static_cast<T*>(memory);
    if (cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the device failed");
  }
  ~DeviceVector() { cudaFree(data_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  T* get() { return data_; }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("a kernel failed");
    if (cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the host failed");
    return host;
  }

 private:
  std::size_t bytes() const { return size_ * sizeof(T); }
  T* data_ = nullptr;
  std::size_t size_;
};

#endif

// Host side of the GPU's bf16 rounding (no device needed): nearest, ties to
// even, NaN kept a NaN, infinities kept.
TEST(Bf16Rounding, NearestTiesToEvenAndSpecialValues) {
  const auto bits_of = [](std::uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return elementwise::bf16_bits(f);
  };
  EXPECT_EQ(bits_of(0x3F800000u), 0x3F80);  // 1.0
  EXPECT_EQ(bits_of(0x3F808000u), 0x3F80);  // halfway, lower neighbour even: down
  EXPECT_EQ(bits_of(0x3F818000u), 0x3F82);  // halfway, lower neighbour odd: up
  EXPECT_EQ(bits_of(0x3F808001u), 0x3F81);  // above halfway: up
  EXPECT_EQ(bits_of(0xBF807FFFu), 0xBF80);  // below halfway, negative: down in magnitude
  EXPECT_EQ(bits_of(0x7F800000u), 0x7F80);  // +inf
  EXPECT_EQ(bits_of(0x7F800001u), 0x7FC0);  // a NaN whose payload would round away stays a NaN
  EXPECT_EQ(bits_of(0x7F7FFFFFu), 0x7F80);  // the largest float rounds to +inf, as in ggml
  for (float v : {0.0f, -2.5f, 3.140625f, 1e-20f}) {
    EXPECT_EQ(bf16_to_float(elementwise::bf16_bits(bf16_to_float(elementwise::bf16_bits(v)))),
              bf16_to_float(elementwise::bf16_bits(v)));
  }
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaDeviceReport report = cuda_devices();
    if (!report.built_with_cuda) GTEST_SKIP() << "this build has no CUDA: " << report.why_none;
    if (report.devices.empty()) GTEST_SKIP() << "no CUDA device: " << report.why_none;
  }
};

TEST_F(CudaOps, RmsNormMatchesTheCpuReference) {
#if defined(MIDTUNE_WITH_CUDA)
  const int rows = 7, width = 576, ld = 600;  // a stride wider than the row, as the engine's buffers
  const std::vector<float> x = random_floats(static_cast<std::size_t>(rows) * ld, 3.0f, 1);
  const std::vector<float> weight = random_floats(width, 1.0f, 2);
  std::vector<float> expected(static_cast<std::size_t>(rows) * ld, 0.0f);
  rms_norm_rows(x.data(), ld, weight.data(), rows, width, 1e-5f, expected.data(), ld);
  DeviceVector<float> dx(x), dw(weight), dy(std::vector<float>(expected.size(), 0.0f));
  cuda::rms_norm_rows(dx.get(), ld, dw.get(), rows, width, 1e-5f, dy.get(), ld);
  const double worst = worst_relative(dy.to_host(), expected);
  std::printf("rmsnorm: worst relative difference %.3g\n", worst);
  EXPECT_LT(worst, 1e-6);
  EXPECT_THROW(cuda::rms_norm_rows(dx.get(), 10, dw.get(), rows, width, 1e-5f, dy.get(), ld), std::invalid_argument);
#endif
}

// The per-head Q/K norm in place: each head as one rms_norm_rows row, the
// columns after the heads untouched.
TEST_F(CudaOps, RmsNormHeadsMatchesTheCpuReferencePerHead) {
#if defined(MIDTUNE_WITH_CUDA)
  const int tokens = 5, heads = 4, head_dim = 128;
  const std::size_t ld = 640;  // wider than heads x head_dim, as a Q|K|V row
  const std::vector<float> x = random_floats(tokens * ld, 3.0f, 3);
  const std::vector<float> weight = random_floats(head_dim, 1.0f, 4);
  std::vector<float> expected = x;
  for (int t = 0; t < tokens; ++t) {
    float* row = expected.data() + t * ld;
    rms_norm_rows(row, head_dim, weight.data(), heads, head_dim, 1e-6f, row, head_dim);
  }
  DeviceVector<float> dx(x), dw(weight);
  cuda::rms_norm_heads(dx.get(), ld, tokens, heads, head_dim, dw.get(), 1e-6f);
  const double worst = worst_relative(dx.to_host(), expected);
  std::printf("rmsnorm heads: worst relative difference %.3g\n", worst);
  EXPECT_LT(worst, 1e-6);
  EXPECT_THROW(cuda::rms_norm_heads(dx.get(), 100, tokens, heads, head_dim, dw.get(), 1e-6f), std::invalid_argument);
#endif
}

TEST_F(CudaOps, RopeTablesAndRotationMatchTheCpuReferenceForBothPairingsAndPerHeadTables) {
#if defined(MIDTUNE_WITH_CUDA)
  const int tokens = 5, heads = 3, head_dim = 64, rope_dims = 48, pairs = rope_dims / 2;
  // Float positions (CALIOPE's remapped ids are not integers) and one table
  // per head (Ms-PoE's per-head scales).
  const std::vector<double> positions = {0.0, 1.0, 2.5, 40.0, 8191.0};
  const std::vector<float> scales = {1.0f, 1.3f, 2.0f};
  std::vector<double> inverse_frequencies(pairs);
  for (int i = 0; i < pairs; ++i) inverse_frequencies[i] = std::pow(10000.0, -2.0 * i / rope_dims) / (1.0 + 0.1 * i);
  DeviceVector<double> dpos(positions), dinv(inverse_frequencies);
  DeviceVector<float> dscales(scales);
  const std::size_t table_size = static_cast<std::size_t>(tokens) * pairs * 2;
  DeviceVector<float> dtables(std::vector<float>(table_size * heads, 0.0f));
  cuda::rope_tables(dpos.get(), tokens, dscales.get(), heads, dinv.get(), pairs, dtables.get());
  const std::vector<float> tables = dtables.to_host();
  for (RopePairing pairing : {RopePairing::adjacent, RopePairing::halves}) {
    const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens) * heads * head_dim, 1.0f, 3);
    std::vector<float> expected = x;
    const RopeFn rotate = rope_for(Isa::scalar, pairing);
    double worst_table = 0.0;
    for (int h = 0; h < heads; ++h) {
      for (int t = 0; t < tokens; ++t) {
        std::vector<float> entry(static_cast<std::size_t>(pairs) * 2);
        for (int i = 0; i < pairs; ++i) {
          const double angle = positions[t] / static_cast<double>(scales[h]) * inverse_frequencies[i];
          entry[2 * i] = static_cast<float>(std::cos(angle));
          entry[2 * i + 1] = static_cast<float>(std::sin(angle));
          for (int k = 0; k < 2; ++k) {
            const float device = tables[h * table_size + (static_cast<std::size_t>(t) * pairs + i) * 2 + k];
            worst_table = std::max(worst_table, std::fabs(static_cast<double>(device) - entry[2 * i + k]));
          }
        }
        rotate(&expected[(static_cast<std::size_t>(t) * heads + h) * head_dim], entry.data(), rope_dims);
      }
    }
    DeviceVector<float> dx(x);
    cuda::rope_rows(dx.get(), static_cast<std::size_t>(heads) * head_dim, tokens, heads, head_dim, rope_dims, pairing,
                    dtables.get(), table_size);
    const double worst = worst_relative(dx.to_host(), expected);
    std::printf("rope (%s): worst table difference %.3g, worst relative output difference %.3g\n",
                pairing == RopePairing::halves ? "halves" : "adjacent", worst_table, worst);
    EXPECT_LT(worst_table, 1e-6);
    EXPECT_LT(worst, 1e-6);
  }
#endif
}

// Prefill after a cached past, GQA (4 query heads per cache head), more keys
// than one chunk of the kernel, three head sizes, with and without a sliding
// window; outputs, key-0 weights and the last query's row against the scalar
// CPU body.
TEST_F(CudaOps, AttentionMatchesTheCpuReferenceWithReadouts) {
#if defined(MIDTUNE_WITH_CUDA)
  // Head sizes that fill a warp's lanes, leave some idle (80), and the largest (256).
  for (const int head_dim : {64, 80, 256}) {
    const int tokens = 6, past = 1294, heads = 8, kv_heads = 2, keys = past + tokens;
    const float scale = 1.0f / 8.0f;
    const std::size_t q_ld = static_cast<std::size_t>(heads) * head_dim, kv_ld = static_cast<std::size_t>(kv_heads) * head_dim;
    const std::vector<float> q = random_floats(tokens * q_ld, 1.0f, 6);
    const std::vector<float> k = random_floats(keys * kv_ld, 1.0f, 7), v = random_floats(keys * kv_ld, 1.0f, 8);
    for (int window : {0, 700}) {
      std::vector<float> expected(tokens * q_ld), expected_key0(static_cast<std::size_t>(heads) * tokens);
      std::vector<float> expected_row(static_cast<std::size_t>(heads) * keys, 0.0f);
      const int blocks = (keys + kKeyBlock - 1) / kKeyBlock;
      std::vector<float> scratch(static_cast<std::size_t>(kAttentionTile) * keys);
      for (int g = 0; g < kv_heads; ++g) {
        std::vector<float> kt(static_cast<std::size_t>(blocks) * kKeyBlock * head_dim, 0.0f);
        for (int key = 0; key < keys; ++key)
          for (int i = 0; i < head_dim; ++i) kt[key_offset(key, i, head_dim)] = k[key * kv_ld + g * head_dim + i];
        const KeyValueView view{kt.data(), v.data() + g * head_dim, kv_ld, head_dim};
        for (int h = g * (heads / kv_heads); h < (g + 1) * (heads / kv_heads); ++h) {
          for (int t = 0; t < tokens; ++t) {
            AttentionTile tile;
            tile.count = 1;
            tile.q[0] = &q[t * q_ld + h * head_dim];
            tile.out[0] = &expected[t * q_ld + h * head_dim];
            tile.limit[0] = past + t + 1;
            tile.first[0] = window > 0 ? std::max(0, tile.limit[0] - window) : 0;
            if (t == tokens - 1) tile.probs_out[0] = &expected_row[static_cast<std::size_t>(h) * keys];
            tile.key0_weight = &expected_key0[static_cast<std::size_t>(h) * tokens + t];
            attention(attention_scalar(), tile, view, scale, scratch.data());
          }
        }
      }
      DeviceVector<float> dq(q), dk(k), dv(v), dout(std::vector<float>(expected.size(), 0.0f));
      DeviceVector<float> dkey0(std::vector<float>(expected_key0.size(), -1.0f));
      DeviceVector<float> drow(std::vector<float>(expected_row.size(), -1.0f));
      cuda::attention(dq.get(), q_ld, dk.get(), dv.get(), kv_ld, tokens, past, heads, kv_heads, head_dim, window,
                      scale, {}, dout.get(), q_ld, dkey0.get(), drow.get());
      const double worst = worst_relative(dout.to_host(), expected);
      const double worst_key0 = worst_relative(dkey0.to_host(), expected_key0);
      const double worst_row = worst_relative(drow.to_host(), expected_row);
      std::printf("attention (head_dim %d, window %d): worst relative difference out %.3g, key-0 weight %.3g, "
                  "last row %.3g\n", head_dim, window, worst, worst_key0, worst_row);
      EXPECT_LT(worst, 1e-5);
      EXPECT_LT(worst_key0, 1e-6);
      EXPECT_LT(worst_row, 1e-6);
    }
  }
  DeviceVector<float> dummy(std::vector<float>(1, 0.0f));
  EXPECT_THROW(cuda::attention(dummy.get(), 8, dummy.get(), dummy.get(), 8, 1, 0, 3, 2, 4, 0, 1.0f, {}, dummy.get(), 8),
               std::invalid_argument);  // 3 query heads over 2 cache heads
#endif
}

// The bf16 product as the GPU engine will run every projection: weights and
// activations rounded to bf16 (the same rounding on both sides), fp32 sums.
TEST_F(CudaOps, Bf16MatmulMatchesADoubleSumOfTheSameBf16Values) {
#if defined(MIDTUNE_WITH_CUDA)
  const int rows = 5, inputs = 576, outputs = 72, ld_y = 80;
  const std::vector<float> x = random_floats(static_cast<std::size_t>(rows) * inputs, 1.0f, 9);
  const std::vector<float> w = random_floats(static_cast<std::size_t>(outputs) * inputs, 0.05f, 10);
  std::vector<std::uint16_t> w_bf16(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) w_bf16[i] = elementwise::bf16_bits(w[i]);
  std::vector<float> expected(static_cast<std::size_t>(rows) * ld_y, 0.0f);
  double largest = 0.0;
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < outputs; ++o) {
      double sum = 0.0;
      for (int i = 0; i < inputs; ++i) {
        sum += static_cast<double>(bf16_to_float(elementwise::bf16_bits(x[r * inputs + i]))) *
               bf16_to_float(w_bf16[static_cast<std::size_t>(o) * inputs + i]);
      }
      expected[static_cast<std::size_t>(r) * ld_y + o] = static_cast<float>(sum);
      largest = std::max(largest, std::fabs(sum));
    }
  }
  const cuda::CublasContext cublas;
  DeviceVector<float> dx(x), dy(std::vector<float>(expected.size(), 0.0f));
  DeviceVector<std::uint16_t> dx16(std::vector<std::uint16_t>(x.size(), 0)), dw(w_bf16);
  cuda::to_bf16(dx.get(), x.size(), dx16.get());
  const std::vector<std::uint16_t> x16 = dx16.to_host();
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x16[i], elementwise::bf16_bits(x[i])) << "element " << i;
  cuda::matmul_bf16(cublas, dx16.get(), inputs, rows, inputs, dw.get(), outputs, dy.get(), ld_y);
  const std::vector<float> y = dy.to_host();
  double worst = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(double(y[i]) - expected[i]) / largest);
  std::printf("bf16 matmul: worst difference %.3g of the largest output %.3g\n", worst, largest);
  EXPECT_LT(worst, 1e-5);
#endif
}

TEST_F(CudaOps, SwigluAndGegluMatchTheCpuReferences) {
#if defined(MIDTUNE_WITH_CUDA)
  const std::size_t count = 4099;  // not a multiple of the block size
  const std::vector<float> gate = random_floats(count, 4.0f, 4), up = random_floats(count, 1.0f, 5);
  std::vector<float> silu(count), gelu(count);
  silu_mul(gate.data(), up.data(), silu.data(), count, Isa::scalar);
  gelu_tanh_mul(gate.data(), up.data(), gelu.data(), count);
  DeviceVector<float> dg(gate), du(up), dout(std::vector<float>(count, 0.0f));
  cuda::silu_mul(dg.get(), du.get(), dout.get(), count);
  const double worst_silu = worst_relative(dout.to_host(), silu);
  cuda::gelu_tanh_mul(dg.get(), du.get(), dout.get(), count);
  const double worst_gelu = worst_relative(dout.to_host(), gelu);
  std::printf("swiglu: worst relative difference %.3g; geglu: %.3g\n", worst_silu, worst_gelu);
  EXPECT_LT(worst_silu, 1e-6);
  EXPECT_LT(worst_gelu, 1e-6);
#endif
}

}  // namespace
}  // namespace midtune::engine
