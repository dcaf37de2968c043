// Every CUDA op body against its CPU reference, on the same random inputs
// (ggml's test-backend-ops, for midtune's ops). Where the build has no CUDA or
// the machine no device, each test reports itself skipped with the reason, so
// a machine without a GPU passes the suite honestly.
//
// Tolerances (relative to the output's magnitude, float32 data): RMSNorm and
// RoPE 1e-6 (the same float expressions; only the double-precision sum's order
// and the device's cos/sin differ), SwiGLU and GeGLU 1e-6 (the device's expf
// and tanhf are within 2 ulp of the host's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "backends/engine/cuda/devices.hpp"
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
