// Every Device body (backends/engine/devices/device.hpp) against the host reference
// (devices/reference/reference_ops.hpp), op by op on the same random inputs, as ggml's
// test-backend-ops checks each backend: the CPU engine on every ISA this
// machine runs, and CUDA where there is a GPU (one harness: the CUDA kernels
// are checked here, through their Device body). The ops are called through
// Device, so each body's own weight form and KV-cache layout are exercised
// (the CPU's transposed 16-key blocks and per-KV-head values, the
// reference's row-major cache); the ops over rows through ops::<op> on each
// device's op_target, which reaches the same bodies the model runs. Tolerances by what differs: the same
// elementwise.hpp expressions (SIMD bodies within a few ulp: 1e-5 of the
// largest value); products in another precision (the reference rounds
// inputs to bf16, the CPU keeps F32 weights: 1e-2 of the row's magnitude);
// attention sums in another order and the SIMD exp (2e-5). The GPU family's
// kernels below the contract are checked on their own where there is a GPU
// (products over bf16 inputs and attention in another order: 1e-3; the
// prefill attention's products with 10 significant bits, TF32 in the cuBLAS
// body, fp16 in the flash body: 5e-3; bf16 rounding and argmax identical).
// "cuda" is the CUDA body as a user gets it (the flash prefill attention);
// "cuda:kv_bf16" runs every test again with the bf16 KV cache on both the
// CUDA body and the reference (KvForm::bf16), "cuda:gemm" with the cuBLAS
// prefill attention body (PrefillAttention::gemm).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/engine/devices/cuda/cuda_ops_device.hpp"
#include "backends/engine/devices/reference/reference_ops.hpp"
#include "backends/engine/devices/cpu/cpu_device.hpp"
#include "backends/engine/devices/cuda/devices.hpp"
#include "backends/engine/ops/block_gemv.hpp"
#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/fp16.hpp"
#include "backends/engine/ops/gated_activation.hpp"
#include "backends/engine/ops/last_query_rows.hpp"
#include "backends/engine/ops/merge_attention.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/rope.hpp"
#include "backends/engine/ops/row_updates.hpp"
#include "backends/engine/ops/scoring.hpp"
#include "tests/engine/random_blocks.hpp"

namespace midtune::engine {
namespace {

std::vector<float> random_floats(std::size_t n, float bound, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// "cpu:<isa>" for every ISA this CPU has, and "cuda".
std::vector<std::string> bodies() {
  std::vector<std::string> out;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avxvnni, Isa::avx512vnni, Isa::avx512bf16}) {
    out.push_back(std::string("cpu:") + to_string(isa));
  }
  out.push_back("cuda");
  out.push_back("cuda:kv_bf16");
  out.push_back("cuda:gemm");
  return out;
}

// The same inputs on the host reference and on the device under test, and
// their outputs compared.
class AgainstReference {
 protected:
  template <typename T>
  struct Pair {
    DeviceBuffer<T> ref, dev;
  };
  template <typename T>
  Pair<T> both(const std::vector<T>& host) {
    Pair<T> p{DeviceBuffer<T>(ref_, host.size()), DeviceBuffer<T>(*device_, host.size())};
    ref_.upload(p.ref.data(), host.data(), host.size() * sizeof(T));
    device_->upload(p.dev.data(), host.data(), host.size() * sizeof(T));
    return p;
  }
  template <typename T>
  std::vector<T> down(Device& device, const DeviceBuffer<T>& buffer) {
    std::vector<T> out(buffer.size());
    device.download(out.data(), buffer.data(), out.size() * sizeof(T));
    return out;
  }
  // Worst difference within `relative` of the largest reference value.
  template <typename T>
  void expect_close(const Pair<T>& p, double relative, const std::string& op) {
    const std::vector<T> a = down<T>(ref_, p.ref), b = down<T>(*device_, p.dev);
    double scale = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
      // A NaN on one side only is as far as can be (std::max passes a NaN over).
      const bool a_nan = std::isnan(static_cast<double>(a[i])), b_nan = std::isnan(static_cast<double>(b[i]));
      const double d = a_nan || b_nan ? (a_nan && b_nan ? 0.0 : INFINITY)
                                      : std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
      worst = std::max(worst, d);
    }
    std::printf("  %-40s worst |%s - reference| %.3g of largest %.3g\n", op.c_str(), device_->name().c_str(), worst,
                scale);
    EXPECT_LE(worst, relative * std::max(scale, 1e-30)) << op;
  }

  devices::ReferenceOps ref_;
  std::unique_ptr<Device> device_;
};

class DeviceBodies : public AgainstReference, public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string body = GetParam();
    if (cuda()) {
      if (cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
      auto cuda_ops = devices::make_cuda_ops(0);
      if (body == "cuda:kv_bf16") {
        cuda_ops->set_kv_form(devices::KvForm::bf16);
        ref_.set_kv_form(devices::KvForm::bf16);
      }
      if (body == "cuda:gemm") cuda_ops->set_prefill_attention(devices::PrefillAttention::gemm);
      device_ = std::move(cuda_ops);
      return;
    }
    const Isa isa = parse_isa(body.substr(4), "device body");
    if (!isa_available(isa)) GTEST_SKIP() << body << " not available on this CPU";
    device_ = std::make_unique<CpuDevice>(isa);
  }
  bool cuda() const { return GetParam().starts_with("cuda"); }
  // Over a bf16 cache: a key element rotated an ulp apart on the two
  // devices may round to the neighbouring bf16 value, 2^-7 away for the
  // rotated keys here (|k| < 2), which moves that key's score by up to
  // scale |q| 2^-7 <= 1e-3 (|q| <= 1, head_dim >= 64) and its weight, a
  // readout, by that fraction of itself.
  double kv_slack() const { return GetParam() == "cuda:kv_bf16" ? 1e-3 : 0.0; }
};

TEST_P(DeviceBodies, EmbeddingNormProductsAndActivations) {
  const int vocab = 40, width = 64, rows = 6, outputs = 48;
  const std::vector<float> table = random_floats(std::size_t{vocab} * width, 1.0f, 1);
  const MatrixPart table_part{GgmlType::F32, table.data(), vocab};
  const auto ref_table = ref_.load_embedding(table_part, width, sizeof(float) * width);
  const auto dev_table = device_->load_embedding(table_part, width, sizeof(float) * width);
  auto tokens = both(std::vector<std::int32_t>{3, 0, 39, 7, 7, 20});
  auto x = both(std::vector<float>(std::size_t{rows} * width));
  ref_.embed(*ref_table, tokens.ref.data(), rows, 1.5f, x.ref.data());
  device_->embed(*dev_table, tokens.dev.data(), rows, 1.5f, x.dev.data());
  expect_close(x, 0.0, "embed");

  auto weight = both(random_floats(width, 1.0f, 2));
  auto normed = both(std::vector<float>(std::size_t{rows} * width));
  ops::rms_norm_rows(ref_.op_target(), x.ref.data(), width, weight.ref.data(), rows, width, 1e-5f, normed.ref.data(),
                     width);
  ops::rms_norm_rows(device_->op_target(), x.dev.data(), width, weight.dev.data(), rows, width, 1e-5f,
                     normed.dev.data(), width);
  expect_close(normed, 1e-5, "rms_norm_rows");

  // The per-head norm in place, on rows wider than their heads (as Q inside
  // a Q|K|V row): the reference's head equals rms_norm_rows of that head
  // alone, the columns after the heads stay as they were, and the device
  // under test agrees with the reference everywhere.
  {
    const int heads = 3, head_dim = 16;
    const std::size_t ld = 56;
    const std::vector<float> before = random_floats(std::size_t{rows} * ld, 3.0f, 7);
    const std::vector<float> head_weight = random_floats(head_dim, 1.0f, 8);
    auto rows_x = both(before);
    auto w = both(head_weight);
    ops::rms_norm_heads(ref_.op_target(), rows_x.ref.data(), ld, rows, heads, head_dim, w.ref.data(), 1e-6f);
    ops::rms_norm_heads(device_->op_target(), rows_x.dev.data(), ld, rows, heads, head_dim, w.dev.data(), 1e-6f);
    expect_close(rows_x, 1e-5, "rms_norm_heads");
    const std::vector<float> after = down<float>(ref_, rows_x.ref);
    std::vector<float> one(head_dim);
    const std::size_t at = 4 * ld + 2 * head_dim;  // token 4, head 2
    engine::rms_norm_rows(before.data() + at, head_dim, head_weight.data(), 1, head_dim, 1e-6f, one.data(), head_dim);
    for (int i = 0; i < head_dim; ++i) EXPECT_EQ(after[at + i], one[i]) << i;
    for (int t = 0; t < rows; ++t) {
      for (std::size_t i = std::size_t{heads} * head_dim; i < ld; ++i) EXPECT_EQ(after[t * ld + i], before[t * ld + i]);
    }
  }

  // A fused product of two parts (as Q|K|V and gate|up are loaded).
  const std::vector<float> w1 = random_floats(std::size_t{outputs / 2} * width, 0.5f, 3);
  const std::vector<float> w2 = random_floats(std::size_t{outputs / 2} * width, 0.5f, 4);
  const std::vector<MatrixPart> parts = {{GgmlType::F32, w1.data(), outputs / 2}, {GgmlType::F32, w2.data(), outputs / 2}};
  const auto ref_w = ref_.load_matrix(parts, width);
  const auto dev_w = device_->load_matrix(parts, width);
  ASSERT_EQ(dev_w->rows(), outputs);
  ASSERT_EQ(dev_w->cols(), width);
  auto y = both(std::vector<float>(std::size_t{rows} * outputs));
  ref_.matmul(*ref_w, normed.ref.data(), width, rows, y.ref.data(), outputs);
  device_->matmul(*dev_w, normed.dev.data(), width, rows, y.dev.data(), outputs);
  expect_close(y, 1e-2, "matmul (F32 weights, reference bf16)");

  // The gated activation reads gate and up from the fused product's rows.
  const int half = outputs / 2;
  for (FfnActivation activation : {FfnActivation::silu, FfnActivation::gelu_tanh}) {
    auto act = both(std::vector<float>(std::size_t{rows} * half));
    ops::gated_activation(ref_.op_target(), activation, y.ref.data(), y.ref.data() + half, outputs, rows, half,
                          act.ref.data(), half);
    ops::gated_activation(device_->op_target(), activation, y.dev.data(), y.dev.data() + half, outputs, rows, half,
                          act.dev.data(), half);
    // Inputs differ by the products' precision: compare on the reference's inputs.
    auto same_in = both(down<float>(ref_, y.ref));
    ops::gated_activation(ref_.op_target(), activation, same_in.ref.data(), same_in.ref.data() + half, outputs, rows,
                          half, act.ref.data(), half);
    ops::gated_activation(device_->op_target(), activation, same_in.dev.data(), same_in.dev.data() + half, outputs,
                          rows, half, act.dev.data(), half);
    expect_close(act, 1e-5, activation == FfnActivation::silu ? "gated_activation silu" : "gated_activation gelu");
    // Without an up projection (MPT's plain GELU): act(gate) alone.
    ops::gated_activation(ref_.op_target(), activation, same_in.ref.data(), nullptr, outputs, rows, half,
                          act.ref.data(), half);
    ops::gated_activation(device_->op_target(), activation, same_in.dev.data(), nullptr, outputs, rows, half,
                          act.dev.data(), half);
    expect_close(act, 1e-5, "gated_activation without up");
    const std::vector<float> gate = down<float>(ref_, same_in.ref), plain = down<float>(ref_, act.ref);
    EXPECT_EQ(plain[half + 3], activation == FfnActivation::silu ? elementwise::silu_mul(gate[outputs + 3], 1.0f)
                                                                  : elementwise::gelu_tanh_mul(gate[outputs + 3], 1.0f));
  }

  // LayerNorm with and without a bias (MPT), against the formula in double.
  auto layer_bias = both(random_floats(width, 0.5f, 8));
  for (const bool with_bias : {true, false}) {
    auto ln = both(std::vector<float>(std::size_t{rows} * width));
    const float* b_ref = with_bias ? layer_bias.ref.data() : nullptr;
    const float* b_dev = with_bias ? layer_bias.dev.data() : nullptr;
    ops::layer_norm_rows(ref_.op_target(), x.ref.data(), width, weight.ref.data(), b_ref, rows, width, 1e-5f,
                         ln.ref.data(), width);
    ops::layer_norm_rows(device_->op_target(), x.dev.data(), width, weight.dev.data(), b_dev, rows, width, 1e-5f,
                         ln.dev.data(), width);
    expect_close(ln, 1e-6, with_bias ? "layer_norm_rows (bias)" : "layer_norm_rows");
    const std::vector<float> xs = down<float>(ref_, x.ref), ws = down<float>(ref_, weight.ref);
    const std::vector<float> bs = down<float>(ref_, layer_bias.ref), got = down<float>(ref_, ln.ref);
    const int r = 2;
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < width; ++i) mean += xs[r * width + i] / width;
    for (int i = 0; i < width; ++i) var += (xs[r * width + i] - mean) * (xs[r * width + i] - mean) / width;
    for (int i = 0; i < width; ++i) {
      const double want = (xs[r * width + i] - mean) / std::sqrt(var + 1e-5) * ws[i] + (with_bias ? bs[i] : 0.0);
      EXPECT_NEAR(got[r * width + i], want, 1e-5) << i;
    }
  }

  // Bounds on values: a soft cap (gemma2's final logits) and a clamp (MPT's clamp_kqv).
  for (const bool soft : {true, false}) {
    auto capped = both(random_floats(std::size_t{rows} * width, 3.0f, 9));
    ops::cap_values(ref_.op_target(), capped.ref.data(), capped.ref.size(), 1.5f, soft);
    ops::cap_values(device_->op_target(), capped.dev.data(), capped.dev.size(), 1.5f, soft);
    expect_close(capped, 1e-6, soft ? "cap_values (soft)" : "cap_values (clamp)");
    const std::vector<float> in = random_floats(std::size_t{rows} * width, 3.0f, 9), got = down<float>(ref_, capped.ref);
    for (std::size_t i = 0; i < in.size(); ++i) {
      EXPECT_NEAR(got[i], soft ? 1.5 * std::tanh(in[i] / 1.5) : std::clamp(in[i], -1.5f, 1.5f), 1e-6) << i;
    }
  }

  auto bias = both(random_floats(outputs, 1.0f, 5));
  ops::add_row_vector(ref_.op_target(), y.ref.data(), outputs, rows, bias.ref.data(), outputs);
  ops::add_row_vector(device_->op_target(), y.dev.data(), outputs, rows, bias.dev.data(), outputs);
  expect_close(y, 1e-2, "add_row_vector (on the products)");
  ops::add(ref_.op_target(), normed.ref.data(), x.ref.data(), normed.ref.size());
  ops::add(device_->op_target(), normed.dev.data(), x.dev.data(), normed.dev.size());
  expect_close(normed, 1e-5, "add");
}

// The block types of the GPU's `file` weight form (devices::WeightForm),
// those it widens at load (the float types; Q3_K for any other), each in a
// fused matrix of two parts: the type above Q6_K, as a Q4_K_M file stores
// Q|K|V.
const std::vector<GgmlType> kFileFormTypes = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                              GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                              GgmlType::F16,  GgmlType::F32,  GgmlType::BF16, GgmlType::Q3_K};

struct FusedBlocks {
  static constexpr int kCols = 512, kTop = 24, kBottom = 20;
  std::vector<std::uint8_t> top, bottom;
  std::vector<MatrixPart> parts;
  explicit FusedBlocks(GgmlType type)
      : top(::midtune::testing::random_blocks(type, kTop, kCols, 11 + static_cast<int>(type))),
        bottom(::midtune::testing::random_blocks(GgmlType::Q6_K, kBottom, kCols, 12)),
        parts{{type, top.data(), kTop}, {GgmlType::Q6_K, bottom.data(), kBottom}} {}
};

// On the host: the reference's `file` form multiplies the bf16 form's weights
// (each tile dequantised as the bf16 form widens at load), on tiles of 7 rows
// that cross the two parts, or for few rows straight from the blocks
// (matmul_blocks); its memory is the file's blocks.
TEST(FileWeightForm, TheReferenceMultipliesTheBf16FormsWeightsFromTheBlocks) {
  const int rows = 5;
  const std::vector<float> x = random_floats(std::size_t{rows} * FusedBlocks::kCols, 1.0f, 21);
  for (const GgmlType type : kFileFormTypes) {
    const FusedBlocks w(type);
    for (const bool from_blocks : {false, true}) {
      devices::ReferenceOps wide, file;
      file.set_weight_form(devices::WeightForm::file);
      file.set_weight_tile_elements(7 * FusedBlocks::kCols);
      file.set_block_gemv_rows(from_blocks ? rows : 0);
      const auto wide_w = wide.load_matrix(w.parts, FusedBlocks::kCols);
      const auto file_w = file.load_matrix(w.parts, FusedBlocks::kCols);
      const int outputs = FusedBlocks::kTop + FusedBlocks::kBottom;
      ASSERT_EQ(file_w->rows(), outputs);
      const std::size_t top_bytes = devices::DeviceOps::keeps_blocks(type)
                                        ? w.top.size()
                                        : std::size_t{FusedBlocks::kTop} * FusedBlocks::kCols * 2;
      EXPECT_EQ(file_w->bytes(), top_bytes + w.bottom.size()) << ggml_type_info(type).name;
      EXPECT_EQ(wide_w->bytes(), std::size_t{outputs} * FusedBlocks::kCols * 2);
      std::vector<float> a(std::size_t{rows} * outputs), b(a.size());
      wide.matmul(*wide_w, x.data(), FusedBlocks::kCols, rows, a.data(), outputs);
      file.matmul(*file_w, x.data(), FusedBlocks::kCols, rows, b.data(), outputs);
      double worst = 0.0, scale = 0.0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
      }
      EXPECT_LE(worst, 1e-5 * scale) << ggml_type_info(type).name;  // Eigen may block a tile otherwise
      EXPECT_GT(scale, 0.1) << ggml_type_info(type).name;  // weights of order 1, not zeros
    }
  }
  devices::ReferenceOps ref;
  EXPECT_EQ(ref.precision(), "bf16");
  ref.set_weight_form(devices::WeightForm::file);
  EXPECT_EQ(ref.precision(), "bf16 from file blocks");
}

// Each body's product on the fused block matrices against the reference's
// `file` form: the CUDA body in its `file` form (the same bf16 weights: 1e-3,
// as matmul_bf16), for 1, 3, 17 and 32 rows straight from the blocks
// (block_gemv_cuda.cu) and for 6 and 40 through the tile, the CPU bodies on
// their own packed blocks with int8 or fp32 activations (an independent
// reading of every block layout).
TEST_P(DeviceBodies, ProductsOverTheFileFormsBlocks) {
  const bool cuda = this->cuda();
  if (cuda) static_cast<devices::DeviceOps&>(*device_).set_weight_form(devices::WeightForm::file);
  ref_.set_weight_form(devices::WeightForm::file);
  for (const int rows : {6, 1, 3, 17, 32, 40}) {
    if (!cuda && rows != 6) continue;  // the CPU bodies' products are checked on their own elsewhere
    const bool few = rows != 6 && rows != 40;  // the block kernel up to 32 rows, whatever the default
    if (cuda) static_cast<devices::DeviceOps&>(*device_).set_block_gemv_rows(few ? rows : 0);
    auto x = both(random_floats(static_cast<std::size_t>(rows) * FusedBlocks::kCols, 1.0f, 22 + rows));
    for (const GgmlType type : kFileFormTypes) {
      const FusedBlocks w(type);
      const int outputs = FusedBlocks::kTop + FusedBlocks::kBottom;
      const auto ref_w = ref_.load_matrix(w.parts, FusedBlocks::kCols);
      const auto dev_w = device_->load_matrix(w.parts, FusedBlocks::kCols);
      auto y = both(std::vector<float>(static_cast<std::size_t>(rows) * outputs));
      ref_.matmul(*ref_w, x.ref.data(), FusedBlocks::kCols, rows, y.ref.data(), outputs);
      device_->matmul(*dev_w, x.dev.data(), FusedBlocks::kCols, rows, y.dev.data(), outputs);
      expect_close(y, cuda ? 1e-3 : 2e-2,
                   std::string("matmul (file form, ") + ggml_type_info(type).name + " + Q6_K, " +
                       std::to_string(rows) + " rows" + (cuda ? (few ? ", from blocks)" : ", tiles)") : ")"));
    }
  }
}

// The GPU family's few-rows kernel on its own against the host reference
// device (dequantize_row, bf16, Eigen) and against the host body beside
// the kernel (block_gemv_host: the kernel's own block units, double sums):
// every block type, weight rows not a multiple of a thread block's, K-quant
// rows of 1 and 3 blocks, token rows that leave passes part-filled (3, 17;
// 32 = two passes of 16), strided x and y. Sums in another order: 1e-4 of
// the largest output (a misread weight is of the order of the outputs).
TEST_P(DeviceBodies, FewRowsProductsStraightFromTheBlocks) {
  if (GetParam() != "cuda") GTEST_SKIP() << "the GPU family's kernel (the CPU bodies have their own products)";
  auto& dev = static_cast<devices::DeviceOps&>(*device_);
  const std::vector<GgmlType> types(kFileFormTypes.begin(), kFileFormTypes.begin() + 8);  // the block types
  for (const GgmlType type : types) {
    for (const int cols : {256, 768}) {
      for (const int outputs : {1, 37}) {
        const std::vector<std::uint8_t> blocks =
            ::midtune::testing::random_blocks(type, outputs, cols, 50 + static_cast<int>(type) + outputs);
        const std::size_t row_bytes = blocks.size() / outputs;
        auto w = both(blocks);
        for (const int rows : {1, 3, 17, 32}) {
          const std::size_t ld_x = cols + 8, ld_y = outputs + 3;
          std::vector<std::uint16_t> xb(rows * ld_x);
          const std::vector<float> xf = random_floats(xb.size(), 1.0f, 60 + rows);
          for (std::size_t i = 0; i < xb.size(); ++i) xb[i] = elementwise::bf16_bits(xf[i]);
          auto x = both(xb);
          auto y = both(std::vector<float>(rows * ld_y, 0.0f));
          ref_.matmul_blocks(type, w.ref.data(), row_bytes, outputs, cols, x.ref.data(), ld_x, rows, y.ref.data(),
                             ld_y);
          dev.matmul_blocks(type, w.dev.data(), row_bytes, outputs, cols, x.dev.data(), ld_x, rows, y.dev.data(), ld_y);
          const std::string shape = std::string(ggml_type_info(type).name) + ", " + std::to_string(outputs) + "x" +
                                    std::to_string(cols) + ", " + std::to_string(rows) + " rows";
          expect_close(y, 1e-4, "matmul_blocks (" + shape + ")");
          block_gemv_host(static_cast<std::uint32_t>(type), blocks.data(), row_bytes, outputs, cols, xb.data(), ld_x,
                          rows, y.ref.data(), ld_y);  // the reference device's memory is the host's
          expect_close(y, 1e-4, "matmul_blocks vs block_gemv_host (" + shape + ")");
        }
      }
    }
  }
}

// The KV cache in each body's own layout: two calls (a prefill, then more
// tokens after it), GQA with shared and with per-head key slots, with and
// without a sliding window; attention's outputs and readouts, then SIW's
// correction, as the model calls them.
TEST_P(DeviceBodies, KvCacheAttentionAndReadouts) {
  const int heads = 4, kv_heads = 2, head_dim = 32, rope_dims = 32, pairs = rope_dims / 2, capacity = 40;
  const std::size_t q_width = std::size_t{heads} * head_dim, kv_width = std::size_t{kv_heads} * head_dim;
  const std::size_t qkv_width = q_width + 2 * kv_width;
  std::vector<double> inverse_frequencies(pairs);
  for (int i = 0; i < pairs; ++i) inverse_frequencies[i] = std::pow(10000.0, -2.0 * i / rope_dims);
  auto inv = both(inverse_frequencies);
  for (const int slots : {kv_heads, heads}) {
    for (const int window : {0, 7}) {
      const std::string shape = " (" + std::to_string(slots) + " slots, window " + std::to_string(window) + ")";
      const auto ref_kv = ref_.make_layer_kv(capacity, slots, kv_heads, head_dim);
      const auto dev_kv = device_->make_layer_kv(capacity, slots, kv_heads, head_dim);
      int past = 0;
      for (const int tokens : {21, 5}) {
        auto qkv = both(random_floats(tokens * qkv_width, 1.0f, 10 + tokens + slots + window));
        std::vector<double> positions(tokens);
        for (int t = 0; t < tokens; ++t) positions[t] = past + t + 0.25 * (t % 3);
        auto pos = both(positions);
        // One table per query head where the slots are per head (Ms-PoE's
        // scales), else one shared table.
        const int tables = slots == heads ? heads : 1;
        std::vector<float> scales(tables);
        for (int k = 0; k < tables; ++k) scales[k] = 1.0f + 0.5f * k;
        auto scale = both(scales);
        const std::size_t table_size = static_cast<std::size_t>(tokens) * rope_dims;
        auto cos_sin = both(std::vector<float>(tables * table_size));
        ops::rope_tables(ref_.op_target(), pos.ref.data(), tokens, scale.ref.data(), tables, inv.ref.data(), pairs,
                         cos_sin.ref.data());
        ops::rope_tables(device_->op_target(), pos.dev.data(), tokens, scale.dev.data(), tables, inv.dev.data(), pairs,
                         cos_sin.dev.data());
        expect_close(cos_sin, 0.0, "rope_tables" + shape);
        const std::size_t stride = tables == 1 ? 0 : table_size;

        ref_.cache_values(*ref_kv, past, qkv.ref.data() + q_width + kv_width, qkv_width, tokens);
        device_->cache_values(*dev_kv, past, qkv.dev.data() + q_width + kv_width, qkv_width, tokens);
        ref_.cache_keys(*ref_kv, past, qkv.ref.data() + q_width, qkv_width, tokens, rope_dims, RopePairing::adjacent,
                        cos_sin.ref.data(), stride);
        device_->cache_keys(*dev_kv, past, qkv.dev.data() + q_width, qkv_width, tokens, rope_dims,
                            RopePairing::adjacent, cos_sin.dev.data(), stride);
        // Queries rotated in place, as the model rotates its copy of them.
        ops::rope_rows(ref_.op_target(), qkv.ref.data(), qkv_width, tokens, heads, head_dim, rope_dims,
                       RopePairing::adjacent, cos_sin.ref.data(), stride);
        ops::rope_rows(device_->op_target(), qkv.dev.data(), qkv_width, tokens, heads, head_dim, rope_dims,
                       RopePairing::adjacent, cos_sin.dev.data(), stride);
        expect_close(qkv, 1e-5, "rope_rows" + shape);

        auto out = both(std::vector<float>(tokens * q_width));
        auto key0 = both(std::vector<float>(std::size_t{heads} * tokens));
        auto last = both(std::vector<float>(std::size_t{heads} * (past + tokens)));
        auto lse = both(std::vector<float>(std::size_t{heads} * tokens));
        const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        ref_.attention(qkv.ref.data(), qkv_width, *ref_kv, tokens, past, heads, window, softmax_scale, {},
                       out.ref.data(), q_width, {key0.ref.data(), last.ref.data(), lse.ref.data()});
        device_->attention(qkv.dev.data(), qkv_width, *dev_kv, tokens, past, heads, window, softmax_scale, {},
                           out.dev.data(), q_width, {key0.dev.data(), last.dev.data(), lse.dev.data()});
        // The cuda bodies answer prefill-sized calls with 10 significant
        // bits in the products' inputs: cuBLAS in TF32 with P V in fp16, the
        // flash body all in fp16 (fp32 sums in both).
        const double tolerance = (cuda() && tokens >= 32 ? 2e-3 : 2e-5) + kv_slack();
        expect_close(out, tolerance, "attention" + shape);
        expect_close(key0, tolerance, "attention key-0 weights" + shape);
        expect_close(last, tolerance, "attention last row" + shape);
        expect_close(lse, tolerance, "attention log-sum-exp" + shape);
        // Shaped scores (gemma2's soft-cap, MPT's ALiBi, both): the same
        // agreement, and a result measurably away from the unshaped one.
        const std::vector<float> unshaped = down<float>(ref_, out.ref);
        for (const ScoreShaping shaping : {ScoreShaping{0.2f, 0.0f}, ScoreShaping{0.0f, 8.0f}, ScoreShaping{0.2f, 8.0f}}) {
          const std::string how = shape + " softcap " + std::to_string(shaping.softcap) + " max_alibi_bias " +
                                  std::to_string(shaping.max_alibi_bias);
          auto shaped = both(std::vector<float>(tokens * q_width));
          auto shaped_last = both(std::vector<float>(std::size_t{heads} * (past + tokens)));
          ref_.attention(qkv.ref.data(), qkv_width, *ref_kv, tokens, past, heads, window, softmax_scale, shaping,
                         shaped.ref.data(), q_width, {nullptr, shaped_last.ref.data()});
          device_->attention(qkv.dev.data(), qkv_width, *dev_kv, tokens, past, heads, window, softmax_scale, shaping,
                             shaped.dev.data(), q_width, {nullptr, shaped_last.dev.data()});
          expect_close(shaped, 2e-5 + kv_slack(), "attention" + how);
          expect_close(shaped_last, 2e-5 + kv_slack(), "attention last row" + how);
          const std::vector<float> got = down<float>(ref_, shaped.ref);
          double moved = 0.0;
          for (std::size_t i = 0; i < got.size(); ++i) moved = std::max(moved, static_cast<double>(std::fabs(got[i] - unshaped[i])));
          EXPECT_GT(moved, 1e-2) << "the shaping changes nothing" << how;
        }

        auto factors = both(random_floats(tokens, 2.0f, 99));
        auto same_out = both(down<float>(ref_, out.ref));
        auto same_key0 = both(down<float>(ref_, key0.ref));
        ref_.add_key0_correction(same_out.ref.data(), q_width, tokens, heads, *ref_kv, same_key0.ref.data(),
                                 factors.ref.data());
        device_->add_key0_correction(same_out.dev.data(), q_width, tokens, heads, *dev_kv, same_key0.dev.data(),
                                     factors.dev.data());
        expect_close(same_out, 1e-5, "add_key0_correction" + shape);
        past += tokens;
      }
    }
  }
}

// A long cache (more keys than one chunk of the CUDA kernel; the CPU's
// split decode from 256 keys on), head sizes that fill a warp's lanes (64),
// leave some idle (80) and the largest a GPU head takes (256), GQA 4 query
// heads per KV head, with and without a sliding window: a few decode-like
// queries and a block of 40 (the GPU's prefill body from 32 queries on) at
// the end of the cache, outputs and readouts against the reference.
TEST_P(DeviceBodies, LongCacheAttentionOverHeadSizes) {
  const int heads = 8, kv_heads = 2, keys = 1300;
  for (const int head_dim : {64, 80, 256}) {
    const std::size_t q_width = std::size_t{heads} * head_dim, kv_width = std::size_t{kv_heads} * head_dim;
    const int pairs = head_dim / 2;
    std::vector<double> inverse_frequencies(pairs);
    for (int i = 0; i < pairs; ++i) inverse_frequencies[i] = std::pow(10000.0, -2.0 * i / head_dim);
    auto inv = both(inverse_frequencies);
    std::vector<double> positions(keys);
    for (int t = 0; t < keys; ++t) positions[t] = t;
    auto pos = both(positions);
    auto one = both(std::vector<float>{1.0f});
    auto cos_sin = both(std::vector<float>(std::size_t{keys} * head_dim));
    ops::rope_tables(ref_.op_target(), pos.ref.data(), keys, one.ref.data(), 1, inv.ref.data(), pairs,
                     cos_sin.ref.data());
    ops::rope_tables(device_->op_target(), pos.dev.data(), keys, one.dev.data(), 1, inv.dev.data(), pairs,
                     cos_sin.dev.data());
    auto k = both(random_floats(keys * kv_width, 1.0f, 31 + head_dim));
    auto v = both(random_floats(keys * kv_width, 1.0f, 32 + head_dim));
    const auto ref_kv = ref_.make_layer_kv(keys, kv_heads, kv_heads, head_dim);
    const auto dev_kv = device_->make_layer_kv(keys, kv_heads, kv_heads, head_dim);
    ref_.cache_keys(*ref_kv, 0, k.ref.data(), kv_width, keys, head_dim, RopePairing::halves, cos_sin.ref.data(), 0);
    device_->cache_keys(*dev_kv, 0, k.dev.data(), kv_width, keys, head_dim, RopePairing::halves, cos_sin.dev.data(), 0);
    ref_.cache_values(*ref_kv, 0, v.ref.data(), kv_width, keys);
    device_->cache_values(*dev_kv, 0, v.dev.data(), kv_width, keys);
    for (const int tokens : {6, 40}) {
      for (const int window : {0, 700}) {
        const std::string shape = " (head_dim " + std::to_string(head_dim) + ", " + std::to_string(tokens) +
                                  " queries, window " + std::to_string(window) + ")";
        const int past = keys - tokens;
        auto q = both(random_floats(tokens * q_width, 1.0f, 33 + tokens + window));
        auto out = both(std::vector<float>(tokens * q_width));
        auto key0 = both(std::vector<float>(std::size_t{heads} * tokens));
        auto last = both(std::vector<float>(std::size_t{heads} * keys));
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        ref_.attention(q.ref.data(), q_width, *ref_kv, tokens, past, heads, window, scale, ScoreShaping{},
                       out.ref.data(), q_width, {key0.ref.data(), last.ref.data()});
        device_->attention(q.dev.data(), q_width, *dev_kv, tokens, past, heads, window, scale, ScoreShaping{},
                           out.dev.data(), q_width, {key0.dev.data(), last.dev.data()});
        // The cuda bodies answer prefill-sized calls with 10 significant
        // bits in the products' inputs: cuBLAS in TF32 with P V in fp16, the
        // flash body all in fp16 (fp32 sums in both).
        const double tolerance = (cuda() && tokens >= 32 ? 2e-3 : 2e-5) + kv_slack();
        expect_close(out, tolerance, "attention" + shape);
        expect_close(key0, tolerance, "attention key-0 weights" + shape);
        expect_close(last, tolerance, "attention last row" + shape);
      }
    }
  }
}

// A decode step over a long cache with three KV heads: on two threads the
// CPU splits its tiles' keys and output dims (its split decode path), which
// shapes the scores in its own softmax pass.
TEST_P(DeviceBodies, ShapedScoresInALongDecodeStep) {
  const int heads = 6, kv_heads = 3, head_dim = 32, prefill = 300;
  const std::size_t q_width = std::size_t{heads} * head_dim, kv_width = std::size_t{kv_heads} * head_dim;
  const std::size_t qkv_width = q_width + 2 * kv_width;
  const auto ref_kv = ref_.make_layer_kv(prefill + 1, kv_heads, kv_heads, head_dim);
  const auto dev_kv = device_->make_layer_kv(prefill + 1, kv_heads, kv_heads, head_dim);
  int past = 0;
  for (const int tokens : {prefill, 1}) {
    auto qkv = both(random_floats(tokens * qkv_width, 1.0f, 40 + tokens));
    ref_.cache_values(*ref_kv, past, qkv.ref.data() + q_width + kv_width, qkv_width, tokens);
    device_->cache_values(*dev_kv, past, qkv.dev.data() + q_width + kv_width, qkv_width, tokens);
    // rope_dims 0: keys cached as they are (MPT has no RoPE).
    ref_.cache_keys(*ref_kv, past, qkv.ref.data() + q_width, qkv_width, tokens, 0, RopePairing::adjacent, nullptr, 0);
    device_->cache_keys(*dev_kv, past, qkv.dev.data() + q_width, qkv_width, tokens, 0, RopePairing::adjacent,
                        nullptr, 0);
    if (tokens == 1) {
      for (const ScoreShaping shaping : {ScoreShaping{}, ScoreShaping{0.2f, 0.0f}, ScoreShaping{0.0f, 8.0f}}) {
        auto out = both(std::vector<float>(q_width));
        auto last = both(std::vector<float>(std::size_t{heads} * (past + 1)));
        ref_.attention(qkv.ref.data(), qkv_width, *ref_kv, 1, past, heads, 0, 0.18f, shaping, out.ref.data(), q_width,
                       {nullptr, last.ref.data()});
        device_->attention(qkv.dev.data(), qkv_width, *dev_kv, 1, past, heads, 0, 0.18f, shaping, out.dev.data(),
                           q_width, {nullptr, last.dev.data()});
        const std::string how = " softcap " + std::to_string(shaping.softcap) + " max_alibi_bias " +
                                std::to_string(shaping.max_alibi_bias);
        expect_close(out, 2e-5 + kv_slack(), "decode attention" + how);
        expect_close(last, 2e-5 + kv_slack(), "decode attention last row" + how);
      }
    }
    past += tokens;
  }
}

// The batched attention step (decode_attention) of five sequences at once:
// different lengths in each step (one with none), GQA caches with shared and
// with per-head key slots, one scale for every head, per-group scales and
// per-head scales (Ms-PoE), float positions (CALIOPE); full, partial and no
// rotary dimensions in both pairings, a sliding window, shaped scores. Three
// steps, so that each reads what the earlier ones cached: the rotated
// queries and the outputs against the reference (on the cuda body: the
// kernels that take the whole step in two launches). Then one long and one
// short sequence, one token a step after a long first one: the cuda body
// splits such a step's keys over several blocks (its short sequence leaves
// parts empty) and merges them, with and without a window and shaping.
TEST_P(DeviceBodies, DecodeAttentionOfSeveralSequences) {
  const int heads = 4, kv_heads = 2, head_dim = 32;
  const std::size_t q_width = std::size_t{heads} * head_dim, kv_width = std::size_t{kv_heads} * head_dim;
  const std::size_t qkv_width = q_width + 2 * kv_width;
  struct Layer {
    int rope_dims;
    RopePairing pairing;
    int window;
    ScoreShaping shaping;
  };
  struct Seq {
    int slots;
    std::vector<float> scales;
  };
  struct Case {
    std::vector<Seq> seqs;
    std::vector<std::vector<int>> steps;  // tokens per sequence and step
    std::vector<Layer> layers;
    int capacity = 16;
  };
  std::vector<Case> cases = {{{{kv_heads, {1.0f, 1.0f, 1.0f, 1.0f}},
                               {heads, {1.0f, 1.5f, 2.0f, 3.0f}},
                               {kv_heads, {2.0f, 2.0f, 0.5f, 0.5f}},
                               {heads, {1.25f, 1.25f, 1.25f, 1.25f}},
                               {kv_heads, {1.0f, 1.0f, 1.0f, 1.0f}}},
                              {{3, 6, 1, 4, 2}, {1, 0, 1, 1, 1}, {2, 1, 3, 1, 1}},
                              {Layer{32, RopePairing::adjacent, 0, {}}, Layer{16, RopePairing::halves, 5, {0.2f, 0.0f}},
                               Layer{0, RopePairing::adjacent, 3, {0.0f, 8.0f}}}}};
  // More sequences than one launch of the CUDA body takes (64).
  Case many;
  for (int i = 0; i < 70; ++i)
    many.seqs.push_back({i % 2 == 0 ? kv_heads : heads, {1.0f, 1.0f, 1.5f + i % 3, 1.5f + i % 3}});
  many.steps = {std::vector<int>(70, 2), std::vector<int>(70, 1)};
  many.layers = {Layer{32, RopePairing::halves, 0, {}}};
  cases.push_back(many);
  Case split{{{kv_heads, {1.0f, 1.0f, 1.0f, 1.0f}}, {heads, {1.0f, 1.5f, 2.0f, 3.0f}}},
             {{600, 3}, {1, 1}, {1, 0}, {1, 1}},
             {Layer{32, RopePairing::adjacent, 0, {}}, Layer{16, RopePairing::halves, 300, {0.2f, 0.0f}},
              Layer{32, RopePairing::adjacent, 0, {0.0f, 8.0f}}},
             604};
  cases.push_back(split);
  for (const Case& cs : cases) {
    const std::vector<Seq>& seqs = cs.seqs;
    const std::vector<std::vector<int>>& steps = cs.steps;
    for (const Layer& layer : cs.layers) {
      const std::string shape = " (" + std::to_string(seqs.size()) + " sequences, rope_dims " +
                                std::to_string(layer.rope_dims) + ", window " + std::to_string(layer.window) + ")";
      const int pairs = layer.rope_dims / 2;
      std::vector<double> inverse_frequencies(std::max(pairs, 1));
      for (int i = 0; i < pairs; ++i) inverse_frequencies[i] = std::pow(10000.0, -2.0 * i / layer.rope_dims);
      auto inv = both(inverse_frequencies);
      std::vector<std::unique_ptr<LayerKv>> ref_kv, dev_kv;
      std::vector<Pair<float>> scales;
      for (const Seq& seq : seqs) {
        ref_kv.push_back(ref_.make_layer_kv(cs.capacity, seq.slots, kv_heads, head_dim));
        dev_kv.push_back(device_->make_layer_kv(cs.capacity, seq.slots, kv_heads, head_dim));
        scales.push_back(both(seq.scales));
      }
      std::vector<int> past(seqs.size(), 0);
      for (std::size_t step = 0; step < steps.size(); ++step) {
        const std::vector<int>& tokens = steps[step];
        int rows = 0;
        std::vector<double> positions;
        for (std::size_t i = 0; i < seqs.size(); ++i) {
          for (int t = 0; t < tokens[i]; ++t) positions.push_back(past[i] + t + 0.25 * ((t + i) % 3));
          rows += tokens[i];
        }
        auto qkv = both(random_floats(rows * qkv_width, 1.0f, 60 + static_cast<unsigned>(step) + layer.rope_dims));
        auto pos = both(positions);
        auto q_rot = both(std::vector<float>(rows * q_width));
        auto out = both(std::vector<float>(rows * q_width));
        DecodeBatch ref_batch;
        ref_batch.qkv = qkv.ref.data();
        ref_batch.qkv_ld = qkv_width;
        ref_batch.positions = pos.ref.data();
        ref_batch.inverse_frequencies = inv.ref.data();
        ref_batch.rope_dims = layer.rope_dims;
        ref_batch.pairing = layer.pairing;
        ref_batch.heads = heads;
        ref_batch.kv_heads = kv_heads;
        ref_batch.head_dim = head_dim;
        ref_batch.window = layer.window;
        ref_batch.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        ref_batch.shaping = layer.shaping;
        ref_batch.q_rot = q_rot.ref.data();
        ref_batch.q_rot_ld = q_width;
        ref_batch.out = out.ref.data();
        ref_batch.out_ld = q_width;
        DecodeBatch dev_batch = ref_batch;
        dev_batch.qkv = qkv.dev.data();
        dev_batch.positions = pos.dev.data();
        dev_batch.inverse_frequencies = inv.dev.data();
        dev_batch.q_rot = q_rot.dev.data();
        dev_batch.out = out.dev.data();
        int row = 0;
        for (std::size_t i = 0; i < seqs.size(); ++i) {
          ref_batch.sequences.push_back(
              {ref_kv[i].get(), row, tokens[i], past[i], scales[i].ref.data(), seqs[i].scales.data()});
          dev_batch.sequences.push_back(
              {dev_kv[i].get(), row, tokens[i], past[i], scales[i].dev.data(), seqs[i].scales.data()});
          row += tokens[i];
          past[i] += tokens[i];
        }
        ref_.decode_attention(ref_batch);
        device_->decode_attention(dev_batch);
        const std::string what = shape + " step " + std::to_string(step);
        expect_close(q_rot, 1e-5, "decode_attention rotated queries" + what);
        expect_close(out, 2e-5 + kv_slack(), "decode_attention" + what);
      }
    }
  }
}

TEST_P(DeviceBodies, TheMethodsOpsAndScoring) {
  const int tokens = 9, heads = 4, kv_heads = 2, head_dim = 16, hidden = 24, vocab = 50;
  const std::size_t q_width = std::size_t{heads} * head_dim, k_width = std::size_t{kv_heads} * head_dim;
  const std::size_t qkv_width = q_width + 2 * k_width;
  auto qkv = both(random_floats(tokens * qkv_width, 1.0f, 21));
  auto rows = both(std::vector<float>(std::size_t{heads} * tokens));
  ops::last_query_rows(ref_.op_target(), qkv.ref.data(), qkv_width, tokens, heads, kv_heads, head_dim, q_width,
                       rows.ref.data());
  ops::last_query_rows(device_->op_target(), qkv.dev.data(), qkv_width, tokens, heads, kv_heads, head_dim, q_width,
                       rows.dev.data());
  expect_close(rows, 1e-5, "last_query_rows");

  auto normed = both(random_floats(std::size_t{tokens} * hidden, 1.0f, 22));
  auto column = both(random_floats(k_width, 1.0f, 23));
  ops::add_channel_column(ref_.op_target(), qkv.ref.data(), qkv_width, tokens, q_width, static_cast<int>(k_width),
                          normed.ref.data(), hidden, 5, 1.7, column.ref.data());
  ops::add_channel_column(device_->op_target(), qkv.dev.data(), qkv_width, tokens, q_width, static_cast<int>(k_width),
                          normed.dev.data(), hidden, 5, 1.7, column.dev.data());
  expect_close(qkv, 1e-6, "add_channel_column");

  std::vector<float> logits = random_floats(std::size_t{3} * vocab, 4.0f, 24);
  logits[vocab + 7] = logits[vocab + 30] = 9.0f;  // a tie: the first index wins
  auto l = both(logits);
  auto gold = both(std::vector<std::int32_t>{0, 30, 49});
  auto argmax = both(std::vector<std::int32_t>(3));
  auto logprob = both(std::vector<double>(3));
  ops::score_rows(ref_.op_target(), l.ref.data(), 3, vocab, gold.ref.data(), argmax.ref.data(), logprob.ref.data());
  ops::score_rows(device_->op_target(), l.dev.data(), 3, vocab, gold.dev.data(), argmax.dev.data(), logprob.dev.data());
  EXPECT_EQ(down<std::int32_t>(*device_, argmax.dev), (std::vector<std::int32_t>{down<std::int32_t>(ref_, argmax.ref)}));
  EXPECT_EQ(down<std::int32_t>(*device_, argmax.dev)[1], 7);
  expect_close(logprob, 1e-6, "score_rows gold log-probability");
}

// A remapped attention (SelfExtend, STRING) is its near keys' attention and
// its far keys' attention merged by their log-sum-exps (merge_attention):
// with the same keys and queries in both halves the merge must give the
// one attention over every key back, which checks the log-sum-exp readout,
// the far half's shifted past and window, and the merge together; and the
// merge op itself agrees with the reference.
TEST_P(DeviceBodies, SplitAttentionMergesBackIntoTheWholeOne) {
  // 3 KV heads: a decode step over 300 keys takes the CPU's split path on
  // 2 threads (the readouts gathered from its jobs).
  const int heads = 6, kv_heads = 3, head_dim = 64, keys = 300, near = 37;
  const std::size_t q_width = std::size_t{heads} * head_dim, kv_width = std::size_t{kv_heads} * head_dim;
  auto k = both(random_floats(keys * kv_width, 1.0f, 41));
  auto v = both(random_floats(keys * kv_width, 1.0f, 42));
  const auto ref_kv = ref_.make_layer_kv(keys, kv_heads, kv_heads, head_dim);
  const auto dev_kv = device_->make_layer_kv(keys, kv_heads, kv_heads, head_dim);
  ref_.cache_keys(*ref_kv, 0, k.ref.data(), kv_width, keys, 0, RopePairing::adjacent, nullptr, 0);
  device_->cache_keys(*dev_kv, 0, k.dev.data(), kv_width, keys, 0, RopePairing::adjacent, nullptr, 0);
  ref_.cache_values(*ref_kv, 0, v.ref.data(), kv_width, keys);
  device_->cache_values(*dev_kv, 0, v.dev.data(), kv_width, keys);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // A prefill (past 0: the first `near` rows have no far keys) and a decode
  // step; a layer without a window and one whose window holds far keys.
  for (const auto& [past, tokens] : {std::pair{0, keys}, std::pair{keys - 1, 1}}) {
    for (const int window : {0, 120}) {
      const std::string shape = " (past " + std::to_string(past) + ", window " + std::to_string(window) + ")";
      auto q = both(random_floats(tokens * q_width, 1.0f, 43 + past + window));
      auto whole = both(std::vector<float>(tokens * q_width));
      device_->attention(q.dev.data(), q_width, *dev_kv, tokens, past, heads, window, scale, {}, whole.dev.data(),
                         q_width, {});
      auto split = both(std::vector<float>(tokens * q_width));
      auto near_lse = both(std::vector<float>(std::size_t{heads} * tokens));
      device_->attention(q.dev.data(), q_width, *dev_kv, tokens, past, heads,
                         window > 0 ? std::min(window, near) : near, scale, {}, split.dev.data(), q_width,
                         {nullptr, nullptr, near_lse.dev.data()});
      const int skip = std::max(0, near - past), far_count = tokens - skip;
      auto far = both(std::vector<float>(far_count * q_width));
      auto far_lse = both(std::vector<float>(std::size_t{heads} * far_count));
      device_->attention(q.dev.data() + skip * q_width, q_width, *dev_kv, far_count, past + skip - near, heads,
                         window > 0 ? window - near : 0, scale, {}, far.dev.data(), q_width,
                         {nullptr, nullptr, far_lse.dev.data()});
      ops::merge_attention(device_->op_target(), split.dev.data() + skip * q_width, q_width, near_lse.dev.data() + skip,
                           tokens, far.dev.data(), q_width, far_lse.dev.data(), far_count, far_count, heads, head_dim);
      const std::vector<float> a = down<float>(*device_, whole.dev), b = down<float>(*device_, split.dev);
      double worst = 0.0;
      for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
      std::printf("  split attention%s: worst |merged - whole| %.3g\n", shape.c_str(), worst);
      EXPECT_LE(worst, 1e-5 + kv_slack()) << shape;

      // The merge op against the reference's, on the same halves.
      auto merged = both(down<float>(*device_, far.dev));
      auto near_rows = both(random_floats(far_count * q_width, 1.0f, 44));
      auto lse_a = both(down<float>(*device_, far_lse.dev));
      auto lse_b = both(random_floats(std::size_t{heads} * far_count, 3.0f, 45));
      for (auto* d : {static_cast<Device*>(&ref_), device_.get()}) {
        const bool is_ref = d == &ref_;
        ops::merge_attention(d->op_target(), (is_ref ? merged.ref : merged.dev).data(), q_width,
                             (is_ref ? lse_a.ref : lse_a.dev).data(), far_count,
                             (is_ref ? near_rows.ref : near_rows.dev).data(), q_width,
                             (is_ref ? lse_b.ref : lse_b.dev).data(), far_count, far_count, heads, head_dim);
      }
      expect_close(merged, 1e-6, "merge_attention" + shape);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bodies, DeviceBodies, ::testing::ValuesIn(bodies()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), ':', '_');
                           return name;
                         });

// The prefill attention body by name (MIDTUNE_CUDA_ATTENTION, --attention):
// gemm, flash or cudnn, anything else refused naming where it came from; the
// choice is part of the precision results record (their sums differ).
TEST(PrefillAttentionChoice, NamesParseAndThePrecisionRecordsTheBody) {
  EXPECT_EQ(devices::parse_prefill_attention("gemm", "x"), devices::PrefillAttention::gemm);
  EXPECT_EQ(devices::parse_prefill_attention("flash", "x"), devices::PrefillAttention::flash);
  try {
    devices::parse_prefill_attention("cublas", "MIDTUNE_CUDA_ATTENTION");
    ADD_FAILURE() << "accepted 'cublas'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MIDTUNE_CUDA_ATTENTION: 'cublas'"), std::string::npos) << e.what();
  }
  devices::ReferenceOps ops;
  EXPECT_EQ(ops.prefill_attention(), devices::PrefillAttention::gemm);
  EXPECT_EQ(ops.precision(), "bf16");
  ops.set_prefill_attention(devices::PrefillAttention::flash);
  EXPECT_EQ(ops.precision(), "bf16, flash attention");
  EXPECT_STREQ(devices::to_string(ops.prefill_attention()), "flash");
  // cuDNN's body only where the build found cuDNN; elsewhere the refusal
  // says what is missing rather than that the name is unknown.
#if defined(MIDTUNE_WITH_CUDNN)
  EXPECT_EQ(devices::parse_prefill_attention("cudnn", "x"), devices::PrefillAttention::cudnn);
  ops.set_prefill_attention(devices::PrefillAttention::cudnn);
  EXPECT_EQ(ops.precision(), "bf16, cudnn attention");
#else
  try {
    devices::parse_prefill_attention("cudnn", "backend.attention");
    ADD_FAILURE() << "accepted 'cudnn' in a build without cuDNN";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("backend.attention: 'cudnn' needs a build with cuDNN"), std::string::npos)
        << e.what();
  }
#endif
}

// A user's GPU runs the flash body unless MIDTUNE_CUDA_ATTENTION says gemm,
// and the results say which ran.
TEST(PrefillAttentionChoice, TheGpuDefaultsToTheFlashBodyAndTheEnvironmentOverrides) {
  if (cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
  const char* set = std::getenv("MIDTUNE_CUDA_ATTENTION");
  const std::string saved = set != nullptr ? set : "";
  unsetenv("MIDTUNE_CUDA_ATTENTION");
  const auto flash = devices::make_cuda_ops(0);
  EXPECT_EQ(flash->prefill_attention(), devices::PrefillAttention::flash);
  EXPECT_EQ(flash->precision(), "bf16, flash attention");
  setenv("MIDTUNE_CUDA_ATTENTION", "gemm", 1);
  const auto gemm = devices::make_cuda_ops(0);
  EXPECT_EQ(gemm->prefill_attention(), devices::PrefillAttention::gemm);
  EXPECT_EQ(gemm->precision(), "bf16");
  if (set != nullptr) setenv("MIDTUNE_CUDA_ATTENTION", saved.c_str(), 1);
  else unsetenv("MIDTUNE_CUDA_ATTENTION");
}

// The host side of the GPU's bf16 rounding (no device needed): nearest, ties
// to even, NaN kept a NaN, infinities kept.
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

// The bf16 KV cache on the host reference (no device needed): each cached
// key and value is bf16_bits of what the fp32 cache holds (keys rotated in
// fp32 first) and is read back exactly, so without RoPE the bf16 cache gives
// bit for bit what the fp32 cache gives over inputs rounded to bf16
// beforehand: attention, its readouts, SIW's correction and the batched
// decode step. With RoPE the two caches differ by that one rounding
// (measured: printed), within 1e-2 of the largest output.
TEST(Bf16KvCache, TheReferenceHoldsEachElementRoundedOnce) {
  devices::ReferenceOps wide, narrow;
  narrow.set_kv_form(devices::KvForm::bf16);
  EXPECT_EQ(wide.kv_value_bytes(), 4u);
  EXPECT_EQ(narrow.kv_value_bytes(), 2u);
  EXPECT_EQ(wide.precision(), "bf16");
  EXPECT_EQ(narrow.precision(), "bf16, bf16 KV cache");
  narrow.set_weight_form(devices::WeightForm::file);
  EXPECT_EQ(narrow.precision(), "bf16 from file blocks, bf16 KV cache");
  const int heads = 4, kv_heads = 2, head_dim = 32, capacity = 40;
  const std::size_t q_width = std::size_t{heads} * head_dim, kv_width = std::size_t{kv_heads} * head_dim;
  const std::size_t qkv_width = q_width + 2 * kv_width;
  // The keys and values of packed rows rounded to bf16 (queries kept).
  const auto to_bf16 = [&](std::vector<float> v) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i % qkv_width >= q_width) v[i] = elementwise::bf16_value(elementwise::bf16_bits(v[i]));
    }
    return v;
  };
  for (const int rope_dims : {0, 32}) {
    const int pairs = rope_dims / 2;
    std::vector<double> inverse_frequencies(std::max(pairs, 1));
    for (int i = 0; i < pairs; ++i) inverse_frequencies[i] = std::pow(10000.0, -2.0 * i / rope_dims);
    for (const int slots : {kv_heads, heads}) {
      const auto wide_kv = wide.make_layer_kv(capacity, slots, kv_heads, head_dim);
      const auto narrow_kv = narrow.make_layer_kv(capacity, slots, kv_heads, head_dim);
      int past = 0;
      double worst = 0.0, largest = 0.0;
      for (const int tokens : {21, 5}) {
        const std::vector<float> qkv = random_floats(tokens * qkv_width, 1.0f, 70 + tokens + slots + rope_dims);
        // Without RoPE the fp32 cache takes the inputs rounded to bf16.
        const std::vector<float> wide_qkv = rope_dims == 0 ? to_bf16(qkv) : qkv;
        std::vector<double> positions(tokens);
        for (int t = 0; t < tokens; ++t) positions[t] = past + t;
        std::vector<float> scales(slots == heads ? heads : 1);
        for (std::size_t k = 0; k < scales.size(); ++k) scales[k] = 1.0f + 0.5f * k;
        const std::size_t table_size = static_cast<std::size_t>(tokens) * rope_dims;
        std::vector<float> cos_sin(scales.size() * std::max<std::size_t>(table_size, 1));
        if (rope_dims > 0) {
          ops::rope_tables(wide.op_target(), positions.data(), tokens, scales.data(), static_cast<int>(scales.size()),
                           inverse_frequencies.data(), pairs, cos_sin.data());
        }
        const std::size_t stride = scales.size() == 1 ? 0 : table_size;
        devices::ReferenceOps* devices[2] = {&wide, &narrow};
        LayerKv* caches[2] = {wide_kv.get(), narrow_kv.get()};
        const std::vector<float>* inputs[2] = {&wide_qkv, &qkv};
        std::vector<float> out[2], key0[2], last[2], corrected[2];
        const std::vector<float> factors = random_floats(tokens, 2.0f, 98);
        for (int d = 0; d < 2; ++d) {
          std::vector<float> rows = *inputs[d];
          devices[d]->cache_values(*caches[d], past, rows.data() + q_width + kv_width, qkv_width, tokens);
          devices[d]->cache_keys(*caches[d], past, rows.data() + q_width, qkv_width, tokens, rope_dims,
                                 RopePairing::adjacent, cos_sin.data(), stride);
          ops::rope_rows(devices[d]->op_target(), rows.data(), qkv_width, tokens, heads, head_dim, rope_dims,
                         RopePairing::adjacent, cos_sin.data(), stride);
          out[d].assign(tokens * q_width, 0.0f);
          key0[d].assign(std::size_t{heads} * tokens, 0.0f);
          last[d].assign(std::size_t{heads} * (past + tokens), 0.0f);
          devices[d]->attention(rows.data(), qkv_width, *caches[d], tokens, past, heads, 0, 0.18f, {}, out[d].data(),
                                q_width, {key0[d].data(), last[d].data()});
          corrected[d] = out[d];
          devices[d]->add_key0_correction(corrected[d].data(), q_width, tokens, heads, *caches[d], key0[d].data(),
                                          factors.data());
        }
        if (rope_dims == 0) {
          EXPECT_EQ(out[1], out[0]) << slots << " slots, " << tokens << " tokens";
          EXPECT_EQ(key0[1], key0[0]);
          EXPECT_EQ(last[1], last[0]);
          EXPECT_EQ(corrected[1], corrected[0]);
        }
        for (std::size_t i = 0; i < out[0].size(); ++i) {
          worst = std::max(worst, static_cast<double>(std::fabs(out[1][i] - out[0][i])));
          largest = std::max(largest, static_cast<double>(std::fabs(out[0][i])));
        }
        past += tokens;
      }
      std::printf("  bf16 KV cache, rope_dims %d, %d slots: worst |attention - fp32 cache's| %.3g of largest %.3g\n",
                  rope_dims, slots, worst, largest);
      if (rope_dims > 0) {
        EXPECT_GT(worst, 0.0) << "the bf16 cache rounded nothing";
        EXPECT_LE(worst, 1e-2 * largest);
      }
    }
  }

  // The batched decode step (Device's body: the per-sequence ops) over a
  // bf16 cache, bit for bit the fp32 cache's over rounded inputs (no RoPE).
  const int tokens = 3;
  const std::vector<float> qkv = random_floats(tokens * qkv_width, 1.0f, 77);
  const std::vector<float> rounded = to_bf16(qkv);
  const std::vector<double> positions = {0, 1, 2}, inverse_frequencies = {1.0};
  const std::vector<float> scales(heads, 1.0f);
  devices::ReferenceOps* devices[2] = {&wide, &narrow};
  const std::vector<float>* inputs[2] = {&rounded, &qkv};
  std::vector<float> out[2];
  for (int d = 0; d < 2; ++d) {
    const auto kv = devices[d]->make_layer_kv(8, kv_heads, kv_heads, head_dim);
    std::vector<float> q_rot(tokens * q_width);
    out[d].assign(tokens * q_width, 0.0f);
    DecodeBatch batch;
    batch.qkv = inputs[d]->data();
    batch.qkv_ld = qkv_width;
    batch.positions = positions.data();
    batch.inverse_frequencies = inverse_frequencies.data();
    batch.heads = heads;
    batch.kv_heads = kv_heads;
    batch.head_dim = head_dim;
    batch.scale = 0.18f;
    batch.q_rot = q_rot.data();
    batch.q_rot_ld = q_width;
    batch.out = out[d].data();
    batch.out_ld = q_width;
    batch.sequences.push_back({kv.get(), 0, tokens, 0, scales.data(), scales.data()});
    devices[d]->decode_attention(batch);
  }
  EXPECT_EQ(out[1], out[0]);
}

// The GPU family's own kernels (devices/device_ops.hpp), below the Device
// contract: bf16 rounding, the products, attention over row-major caches in
// the shapes the CUDA body splits differently (the cuBLAS prefill body), the
// rope pairings and scoring at vocabulary scale.
class GpuKernels : public AgainstReference, public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
    device_ = devices::make_cuda_ops(0);
  }
  devices::DeviceOps& gpu() { return static_cast<devices::DeviceOps&>(*device_); }
};

TEST_F(GpuKernels, Bf16RoundingIsIdenticalAndTheProductSumsInFp32) {
  const int rows = 33, inputs = 160, outputs = 70;
  auto x = both(random_floats(std::size_t{rows} * inputs, 2.0f, 3));
  auto w = both(random_floats(std::size_t{outputs} * inputs, 0.5f, 4));
  auto xb = both(std::vector<std::uint16_t>(x.ref.size()));
  auto wb = both(std::vector<std::uint16_t>(w.ref.size()));
  ref_.to_bf16(x.ref.data(), x.ref.size(), xb.ref.data());
  gpu().to_bf16(x.dev.data(), x.dev.size(), xb.dev.data());
  expect_close(xb, 0.0, "to_bf16");
  ref_.to_bf16(w.ref.data(), w.ref.size(), wb.ref.data());
  gpu().to_bf16(w.dev.data(), w.dev.size(), wb.dev.data());
  auto y = both(std::vector<float>(std::size_t{rows} * outputs));
  ref_.matmul_bf16(xb.ref.data(), inputs, rows, inputs, wb.ref.data(), outputs, y.ref.data(), outputs);
  gpu().matmul_bf16(xb.dev.data(), inputs, rows, inputs, wb.dev.data(), outputs, y.dev.data(), outputs);
  expect_close(y, 1e-3, "matmul_bf16");
}

// The `file` form's dequantisation on the GPU gives the host's bf16 bits for
// every block type it keeps (the same float operations, unfused), here on
// rows with a gap after them (row_bytes wider than the blocks).
TEST_F(GpuKernels, DequantisationGivesTheHostsBf16Bits) {
  const int rows = 9, cols = 768;
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::BF16}) {
    const std::vector<std::uint8_t> packed = ::midtune::testing::random_blocks(type, rows, cols, 31);
    const std::size_t packed_row = packed.size() / rows, row_bytes = packed_row + 6;
    std::vector<std::uint8_t> padded(row_bytes * rows, 0xff);
    for (int r = 0; r < rows; ++r) std::memcpy(&padded[r * row_bytes], &packed[r * packed_row], packed_row);
    auto blocks = both(padded);
    auto out = both(std::vector<std::uint16_t>(std::size_t{rows} * cols));
    ref_.dequantize_bf16(type, blocks.ref.data(), row_bytes, rows, cols, out.ref.data());
    gpu().dequantize_bf16(type, blocks.dev.data(), row_bytes, rows, cols, out.dev.data());
    const std::vector<std::uint16_t> a = down<std::uint16_t>(ref_, out.ref), b = down<std::uint16_t>(*device_, out.dev);
    int differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
    std::printf("  dequantize_bf16 %-5s %d of %zu bf16 values differ from the host's\n", ggml_type_info(type).name,
                differ, a.size());
    EXPECT_EQ(differ, 0) << ggml_type_info(type).name;
  }
}

TEST_F(GpuKernels, RopeAttentionAndTheMethodsOps) {
  const int tokens = 9, past = 30, heads = 4, kv_heads = 2, head_dim = 64, pairs = 32;
  const std::size_t q_width = std::size_t{heads} * head_dim, kv_width = std::size_t{kv_heads} * head_dim;
  std::vector<double> pos(tokens);
  for (int t = 0; t < tokens; ++t) pos[t] = past + t * 1.5;
  auto positions = both(pos);
  auto scales = both(std::vector<float>{1.0f, 1.7f, 2.5f, 0.8f});
  std::vector<double> inv(pairs);
  for (int i = 0; i < pairs; ++i) inv[i] = std::pow(10000.0, -2.0 * i / (2 * pairs));
  auto inverse = both(inv);
  auto tables = both(std::vector<float>(std::size_t{heads} * tokens * pairs * 2));
  ops::rope_tables(ref_.op_target(), positions.ref.data(), tokens, scales.ref.data(), heads, inverse.ref.data(), pairs,
                   tables.ref.data());
  ops::rope_tables(gpu().op_target(), positions.dev.data(), tokens, scales.dev.data(), heads, inverse.dev.data(), pairs,
                   tables.dev.data());
  expect_close(tables, 1e-5, "rope_tables");

  auto q = both(random_floats(tokens * q_width, 1.0f, 5));
  for (RopePairing pairing : {RopePairing::adjacent, RopePairing::halves}) {
    ops::rope_rows(ref_.op_target(), q.ref.data(), q_width, tokens, heads, head_dim, 2 * pairs, pairing,
                   tables.ref.data(), std::size_t{tokens} * pairs * 2);
    ops::rope_rows(gpu().op_target(), q.dev.data(), q_width, tokens, heads, head_dim, 2 * pairs, pairing,
                   tables.dev.data(), std::size_t{tokens} * pairs * 2);
    expect_close(q, 1e-5, "rope_rows");
  }

  const int keys = past + tokens;
  auto k = both(random_floats(std::size_t{keys} * kv_width, 1.0f, 6));
  auto v = both(random_floats(std::size_t{keys} * kv_width, 1.0f, 7));
  for (int window : {0, 16}) {
    auto out = both(std::vector<float>(tokens * q_width));
    auto key0 = both(std::vector<float>(std::size_t{heads} * tokens));
    auto last = both(std::vector<float>(std::size_t{heads} * keys));
    ref_.attention_rows(q.ref.data(), q_width, k.ref.data(), v.ref.data(), kv_width, tokens, past, heads, kv_heads,
                        head_dim, window, 0.125f, {}, out.ref.data(), q_width, {key0.ref.data(), last.ref.data()});
    gpu().attention_rows(q.dev.data(), q_width, k.dev.data(), v.dev.data(), kv_width, tokens, past, heads, kv_heads,
                         head_dim, window, 0.125f, {}, out.dev.data(), q_width, {key0.dev.data(), last.dev.data()});
    expect_close(out, 1e-3, "attention");
    expect_close(key0, 1e-3, "attention key 0");
    expect_close(last, 1e-3, "attention last row");
    auto factors = both(std::vector<float>{1.0f, 0.5f, 1.5f, 2.0f, 1.0f, 0.7f, 1.2f, 0.9f, 1.1f});
    ref_.add_key0_correction_rows(out.ref.data(), q_width, tokens, heads, kv_heads, head_dim, key0.ref.data(),
                             factors.ref.data(), v.ref.data(), kv_width);
    gpu().add_key0_correction_rows(out.dev.data(), q_width, tokens, heads, kv_heads, head_dim, key0.dev.data(),
                              factors.dev.data(), v.dev.data(), kv_width);
    expect_close(out, 1e-3, "add_key0_correction");
  }

  const std::size_t qkv_width = q_width + 2 * kv_width;
  auto qkv = both(random_floats(std::size_t{keys} * qkv_width, 1.0f, 8));
  auto rows = both(std::vector<float>(std::size_t{heads} * keys));
  ops::last_query_rows(ref_.op_target(), qkv.ref.data(), qkv_width, keys, heads, kv_heads, head_dim, q_width,
                       rows.ref.data());
  ops::last_query_rows(gpu().op_target(), qkv.dev.data(), qkv_width, keys, heads, kv_heads, head_dim, q_width,
                       rows.dev.data());
  expect_close(rows, 1e-5, "last_query_rows");

  const int hidden = 48;
  auto normed = both(random_floats(std::size_t{keys} * hidden, 1.0f, 9));
  auto column = both(random_floats(kv_width, 1.0f, 10));
  ops::add_channel_column(ref_.op_target(), qkv.ref.data(), qkv_width, keys, q_width, static_cast<int>(kv_width),
                          normed.ref.data(), hidden, 5, 3.0, column.ref.data());
  ops::add_channel_column(gpu().op_target(), qkv.dev.data(), qkv_width, keys, q_width, static_cast<int>(kv_width),
                          normed.dev.data(), hidden, 5, 3.0, column.dev.data());
  expect_close(qkv, 1e-6, "add_channel_column");
}

// Prefill-sized calls (from 32 queries on) through both GPU prefill bodies,
// `gemm` (cuBLAS: TF32 products, P V in fp16) and `flash` (FlashAttention-2
// tiles: Q, K, V and P in fp16, fp32 sums and softmax), each against the
// reference. Both round the products' inputs to 10 significant bits (2^-11
// relative), hence 5e-3 of the largest reference value for outputs and
// readouts alike. "<body>:kv_bf16": over a bf16 cache (attention_rows_bf16,
// the same bf16 bits on both devices).
class PrefillAttentionBodies : public AgainstReference, public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
    const std::string body = GetParam().substr(0, GetParam().find(':'));
    auto ops = devices::make_cuda_ops(0);
    ops->set_prefill_attention(devices::parse_prefill_attention(body, "test parameter"));
    device_ = std::move(ops);
  }
  bool bf16_cache() const { return GetParam().ends_with(":kv_bf16"); }
  devices::DeviceOps& gpu() { return static_cast<devices::DeviceOps&>(*device_); }

  struct Case {
    int tokens, past, heads, kv_heads, head_dim, window;
    ScoreShaping shaping;
    std::size_t q_pad = 0;  // q_ld = heads x head_dim + q_pad (odd: unaligned rows)
  };
  // One call on random inputs, outputs and both readouts compared.
  void check(const Case& c, unsigned seed) {
    const std::string what = " (" + GetParam() + ", tokens " +
                             std::to_string(c.tokens) + ", past " + std::to_string(c.past) + ", heads " +
                             std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + ", head_dim " +
                             std::to_string(c.head_dim) + ", window " + std::to_string(c.window) + ", softcap " +
                             std::to_string(c.shaping.softcap) + ", alibi " +
                             std::to_string(c.shaping.max_alibi_bias) + ", q_ld +" + std::to_string(c.q_pad) + ")";
    const std::size_t tokens = c.tokens, heads = c.heads, keys = std::size_t(c.past) + c.tokens;
    const std::size_t q_width = heads * c.head_dim, q_ld = q_width + c.q_pad;
    const std::size_t kv_width = std::size_t(c.kv_heads) * c.head_dim;
    auto q = both(random_floats(tokens * q_ld, 1.0f, seed));
    const std::vector<float> k_host = random_floats(keys * kv_width, 1.0f, seed + 1);
    const std::vector<float> v_host = random_floats(keys * kv_width, 1.0f, seed + 2);
    auto out = both(std::vector<float>(tokens * q_width));
    auto key0 = both(std::vector<float>(heads * tokens));
    auto last = both(std::vector<float>(heads * keys));
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    // The same call on both devices, over the cache form k and v hold.
    const auto attend = [&](auto& k, auto& v) {
      const auto call = [&](devices::DeviceOps& ops, const float* q_rows, const auto* keys, const auto* values,
                            float* o, float* k0, float* l) {
        if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(keys)>>, std::uint16_t>) {
          ops.attention_rows_bf16(q_rows, q_ld, keys, values, kv_width, c.tokens, c.past, c.heads, c.kv_heads,
                                  c.head_dim, c.window, scale, c.shaping, o, q_width, {k0, l});
        } else {
          ops.attention_rows(q_rows, q_ld, keys, values, kv_width, c.tokens, c.past, c.heads, c.kv_heads, c.head_dim,
                             c.window, scale, c.shaping, o, q_width, {k0, l});
        }
      };
      call(ref_, q.ref.data(), k.ref.data(), v.ref.data(), out.ref.data(), key0.ref.data(), last.ref.data());
      call(gpu(), q.dev.data(), k.dev.data(), v.dev.data(), out.dev.data(), key0.dev.data(), last.dev.data());
    };
    if (bf16_cache()) {
      const auto bits = [](const std::vector<float>& x) {
        std::vector<std::uint16_t> b(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) b[i] = elementwise::bf16_bits(x[i]);
        return b;
      };
      auto k = both(bits(k_host));
      auto v = both(bits(v_host));
      attend(k, v);
    } else {
      auto k = both(k_host);
      auto v = both(v_host);
      attend(k, v);
    }
    // The body named ran the call: cuDNN's hands back only head sizes it
    // has no kernel for (not multiples of 8), never a shape or shaping.
    const std::string body = GetParam().substr(0, GetParam().find(':'));
    const bool handed_back = body == "cudnn" && c.head_dim % 8 != 0;
    EXPECT_STREQ(devices::to_string(gpu().last_prefill_attention()), handed_back ? "flash" : body.c_str()) << what;
    expect_close(out, 5e-3, "prefill attention" + what);
    expect_close(key0, 5e-3, "prefill attention key 0" + what);
    expect_close(last, 5e-3, "prefill attention last row" + what);
  }
};

// With a window and both readouts: one query block with GQA, several blocks
// (the cuBLAS body takes 512 queries at a time, the flash body 64; 1100 and
// 1030 leave partial last blocks) with GQA and without; a long cache under
// few queries (a teacher-forced tail).
TEST_P(PrefillAttentionBodies, QueryBlocksGqaWindowsAndReadouts) {
  struct Shape {
    int tokens, past, heads, kv_heads;
  };
  for (const Shape shape : {Shape{100, 60, 8, 2}, Shape{1100, 30, 8, 2}, Shape{1030, 0, 4, 4}, Shape{40, 1260, 8, 2}}) {
    for (const int window : {0, 50, 700}) {
      check({shape.tokens, shape.past, shape.heads, shape.kv_heads, 128, window, ScoreShaping{}}, 12);
    }
  }
}

// Every head size class of the flash body (64, 128 and 256 instantiations;
// 50 and 80 padded with zeros, 50 also loading rows element by element),
// unaligned query rows, and the score shaping (gemma2's soft-cap, MPT's
// ALiBi, both) with and without a window, GQA 3 query heads per KV head.
TEST_P(PrefillAttentionBodies, HeadSizesShapingAndUnalignedRows) {
  for (const int head_dim : {50, 64, 80, 128, 256}) {
    check({130, 70, 6, 2, head_dim, 0, ScoreShaping{}}, 20);
    check({97, 0, 6, 2, head_dim, 37, ScoreShaping{}, 1}, 21);
  }
  for (const ScoreShaping shaping : {ScoreShaping{0.2f, 0.0f}, ScoreShaping{0.0f, 8.0f}, ScoreShaping{0.2f, 8.0f}}) {
    for (const int window : {0, 37}) {
      check({130, 70, 6, 2, 64, window, shaping}, 22);
      check({33, 200, 6, 3, 128, window, shaping}, 23);
    }
  }
}

// Every prefill body this build has, over each cache form.
std::vector<std::string> prefill_bodies() {
  std::vector<std::string> bodies = {"gemm", "flash", "gemm:kv_bf16", "flash:kv_bf16"};
#if defined(MIDTUNE_WITH_CUDNN)
  bodies.insert(bodies.end(), {"cudnn", "cudnn:kv_bf16"});
#endif
  return bodies;
}

INSTANTIATE_TEST_SUITE_P(GpuBodies, PrefillAttentionBodies, ::testing::ValuesIn(prefill_bodies()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), ':', '_');
                           return name;
                         });

// The same over a bf16 cache (attention_rows_bf16): the one-query kernel
// (6 queries) and the cuBLAS body (its keys widened to fp32 in the
// workspace, values bf16 -> fp16) against the reference over the same bf16
// bits; and from_bf16 exact.
TEST_F(GpuKernels, AttentionOverABf16CacheMatchesTheReference) {
  struct Shape {
    int tokens, past, heads, kv_heads;
  };
  const int head_dim = 128;
  for (const Shape shape : {Shape{6, 1300, 8, 2}, Shape{100, 60, 8, 2}, Shape{1100, 30, 8, 2}, Shape{1030, 0, 4, 4}}) {
    SCOPED_TRACE("tokens " + std::to_string(shape.tokens) + ", heads " + std::to_string(shape.heads) + "/" +
                 std::to_string(shape.kv_heads));
    const std::size_t tokens = shape.tokens, heads = shape.heads, keys = shape.past + shape.tokens;
    const std::size_t q_width = heads * head_dim, kv_width = std::size_t(shape.kv_heads) * head_dim;
    const auto bits = [](const std::vector<float>& v) {
      std::vector<std::uint16_t> out(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = elementwise::bf16_bits(v[i]);
      return out;
    };
    auto q = both(random_floats(tokens * q_width, 1.0f, 15));
    auto k = both(bits(random_floats(keys * kv_width, 1.0f, 16)));
    auto v = both(bits(random_floats(keys * kv_width, 1.0f, 17)));
    auto wide = both(std::vector<float>(keys * kv_width));
    ref_.from_bf16(k.ref.data(), keys * kv_width, wide.ref.data());
    gpu().from_bf16(k.dev.data(), keys * kv_width, wide.dev.data());
    expect_close(wide, 0.0, "from_bf16");
    const double tolerance = shape.tokens >= 32 ? 5e-3 : 2e-5;
    for (int window : {0, 50}) {
      auto out = both(std::vector<float>(tokens * q_width));
      auto key0 = both(std::vector<float>(heads * tokens));
      auto last = both(std::vector<float>(heads * keys));
      ref_.attention_rows_bf16(q.ref.data(), q_width, k.ref.data(), v.ref.data(), kv_width, shape.tokens, shape.past,
                               shape.heads, shape.kv_heads, head_dim, window, 0.088f, {}, out.ref.data(), q_width,
                               {key0.ref.data(), last.ref.data()});
      gpu().attention_rows_bf16(q.dev.data(), q_width, k.dev.data(), v.dev.data(), kv_width, shape.tokens, shape.past,
                                shape.heads, shape.kv_heads, head_dim, window, 0.088f, {}, out.dev.data(), q_width,
                                {key0.dev.data(), last.dev.data()});
      expect_close(out, tolerance, "attention over a bf16 cache");
      expect_close(key0, tolerance, "attention over a bf16 cache, key 0");
      expect_close(last, tolerance, "attention over a bf16 cache, last row");
    }
  }
}

TEST_F(GpuKernels, ScoringFindsTheFirstMaximumAndTheGoldLogProbability) {
  const int rows = 5, vocab = 1000;
  std::vector<float> logits = random_floats(std::size_t{rows} * vocab, 8.0f, 11);
  logits[2 * vocab + 10] = logits[2 * vocab + 700] = 50.0f;  // a tie: the first index wins
  auto l = both(logits);
  auto gold = both(std::vector<std::int32_t>{0, 999, 700, 5, 123});
  auto argmax = both(std::vector<std::int32_t>(rows));
  auto logprob = both(std::vector<double>(rows));
  ops::score_rows(ref_.op_target(), l.ref.data(), rows, vocab, gold.ref.data(), argmax.ref.data(), logprob.ref.data());
  ops::score_rows(gpu().op_target(), l.dev.data(), rows, vocab, gold.dev.data(), argmax.dev.data(), logprob.dev.data());
  expect_close(argmax, 0.0, "score_rows argmax");
  expect_close(logprob, 1e-9, "score_rows logprob");
}

}  // namespace
}  // namespace midtune::engine
