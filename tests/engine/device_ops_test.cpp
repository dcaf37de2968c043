// Every DeviceOps op of the CUDA device against the host reference device
// (batched/reference_ops.hpp), op by op on the same random inputs, as ggml's
// test-backend-ops checks each backend against the CPU. Tolerances by what
// differs: element-wise ops evaluate the same elementwise.hpp expressions
// (the device's math library is within a few ulp: 1e-5 relative); the
// products and attention sum in another order (1e-3 relative to the row's
// magnitude; 5e-3 where the prefill attention's products use TF32); argmax
// and bf16 rounding must be identical. Where there is no
// GPU every case reports itself skipped ("no CUDA device").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backends/engine/batched/cuda_ops_device.hpp"
#include "backends/engine/batched/reference_ops.hpp"
#include "backends/engine/cuda/devices.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::batched {
namespace {

std::vector<float> random_floats(std::size_t n, float bound, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// One op's inputs on both devices; outputs downloaded for comparison.
class DeviceOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
    gpu_ = make_cuda_ops(0);
  }
  template <typename T>
  struct Pair {
    DeviceBuffer<T> ref, gpu;
  };
  template <typename T>
  Pair<T> both(const std::vector<T>& host) {
    Pair<T> p{DeviceBuffer<T>(ref_, host.size()), DeviceBuffer<T>(*gpu_, host.size())};
    ref_.upload(p.ref.data(), host.data(), host.size() * sizeof(T));
    gpu_->upload(p.gpu.data(), host.data(), host.size() * sizeof(T));
    return p;
  }
  template <typename T>
  void expect_close(const Pair<T>& p, double relative, const char* op) {
    std::vector<T> a(p.ref.size()), b(p.gpu.size());
    ref_.download(a.data(), p.ref.data(), a.size() * sizeof(T));
    gpu_->download(b.data(), p.gpu.data(), b.size() * sizeof(T));
    double scale = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
      worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    }
    std::printf("  %-18s worst |cuda - reference| %.3g of largest %.3g\n", op, worst, scale);
    EXPECT_LE(worst, relative * std::max(scale, 1e-30)) << op;
  }
  ReferenceOps ref_;
  std::unique_ptr<DeviceOps> gpu_;
};

TEST_F(DeviceOpsTest, EmbeddingRmsNormBiasResidualAndActivations) {
  const int vocab = 50, width = 96, rows = 7;
  auto table = both(random_floats(std::size_t{vocab} * width, 1.0f, 1));
  auto tokens = both(std::vector<std::int32_t>{3, 0, 49, 7, 7, 20, 11});
  auto out = both(std::vector<float>(std::size_t{rows} * width));
  ref_.embed(table.ref.data(), width, tokens.ref.data(), rows, 1.5f, out.ref.data());
  gpu_->embed(table.gpu.data(), width, tokens.gpu.data(), rows, 1.5f, out.gpu.data());
  expect_close(out, 0.0, "embed");

  auto weight = both(random_floats(width, 1.0f, 2));
  auto normed = both(std::vector<float>(std::size_t{rows} * width));
  ref_.rms_norm_rows(out.ref.data(), width, weight.ref.data(), rows, width, 1e-5f, normed.ref.data(), width);
  gpu_->rms_norm_rows(out.gpu.data(), width, weight.gpu.data(), rows, width, 1e-5f, normed.gpu.data(), width);
  expect_close(normed, 1e-5, "rms_norm_rows");

  ref_.add_row_vector(normed.ref.data(), width, rows, weight.ref.data(), width);
  gpu_->add_row_vector(normed.gpu.data(), width, rows, weight.gpu.data(), width);
  expect_close(normed, 1e-5, "add_row_vector");
  ref_.add(normed.ref.data(), out.ref.data(), std::size_t{rows} * width);
  gpu_->add(normed.gpu.data(), out.gpu.data(), std::size_t{rows} * width);
  expect_close(normed, 1e-5, "add");

  auto act = both(std::vector<float>(std::size_t{rows} * width));
  ref_.silu_mul(normed.ref.data(), out.ref.data(), act.ref.data(), act.ref.size());
  gpu_->silu_mul(normed.gpu.data(), out.gpu.data(), act.gpu.data(), act.gpu.size());
  expect_close(act, 1e-5, "silu_mul");
  ref_.gelu_tanh_mul(normed.ref.data(), out.ref.data(), act.ref.data(), act.ref.size());
  gpu_->gelu_tanh_mul(normed.gpu.data(), out.gpu.data(), act.gpu.data(), act.gpu.size());
  expect_close(act, 1e-5, "gelu_tanh_mul");
}

TEST_F(DeviceOpsTest, Bf16RoundingIsIdenticalAndTheProductSumsInFp32) {
  const int rows = 33, inputs = 160, outputs = 70;
  auto x = both(random_floats(std::size_t{rows} * inputs, 2.0f, 3));
  auto w = both(random_floats(std::size_t{outputs} * inputs, 0.5f, 4));
  auto xb = both(std::vector<std::uint16_t>(x.ref.size()));
  auto wb = both(std::vector<std::uint16_t>(w.ref.size()));
  ref_.to_bf16(x.ref.data(), x.ref.size(), xb.ref.data());
  gpu_->to_bf16(x.gpu.data(), x.gpu.size(), xb.gpu.data());
  expect_close(xb, 0.0, "to_bf16");
  ref_.to_bf16(w.ref.data(), w.ref.size(), wb.ref.data());
  gpu_->to_bf16(w.gpu.data(), w.gpu.size(), wb.gpu.data());
  auto y = both(std::vector<float>(std::size_t{rows} * outputs));
  ref_.matmul_bf16(xb.ref.data(), inputs, rows, inputs, wb.ref.data(), outputs, y.ref.data(), outputs);
  gpu_->matmul_bf16(xb.gpu.data(), inputs, rows, inputs, wb.gpu.data(), outputs, y.gpu.data(), outputs);
  expect_close(y, 1e-3, "matmul_bf16");
}

TEST_F(DeviceOpsTest, RopeAttentionAndTheMethodsOps) {
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
  ref_.rope_tables(positions.ref.data(), tokens, scales.ref.data(), heads, inverse.ref.data(), pairs, tables.ref.data());
  gpu_->rope_tables(positions.gpu.data(), tokens, scales.gpu.data(), heads, inverse.gpu.data(), pairs, tables.gpu.data());
  expect_close(tables, 1e-5, "rope_tables");

  auto q = both(random_floats(tokens * q_width, 1.0f, 5));
  for (RopePairing pairing : {RopePairing::adjacent, RopePairing::halves}) {
    ref_.rope_rows(q.ref.data(), q_width, tokens, heads, head_dim, 2 * pairs, pairing, tables.ref.data(),
                   std::size_t{tokens} * pairs * 2);
    gpu_->rope_rows(q.gpu.data(), q_width, tokens, heads, head_dim, 2 * pairs, pairing, tables.gpu.data(),
                    std::size_t{tokens} * pairs * 2);
    expect_close(q, 1e-5, "rope_rows");
  }

  const int keys = past + tokens;
  auto k = both(random_floats(std::size_t{keys} * kv_width, 1.0f, 6));
  auto v = both(random_floats(std::size_t{keys} * kv_width, 1.0f, 7));
  for (int window : {0, 16}) {
    auto out = both(std::vector<float>(tokens * q_width));
    auto key0 = both(std::vector<float>(std::size_t{heads} * tokens));
    auto last = both(std::vector<float>(std::size_t{heads} * keys));
    ref_.attention(q.ref.data(), q_width, k.ref.data(), v.ref.data(), kv_width, tokens, past, heads, kv_heads,
                   head_dim, window, 0.125f, out.ref.data(), q_width, key0.ref.data(), last.ref.data());
    gpu_->attention(q.gpu.data(), q_width, k.gpu.data(), v.gpu.data(), kv_width, tokens, past, heads, kv_heads,
                    head_dim, window, 0.125f, out.gpu.data(), q_width, key0.gpu.data(), last.gpu.data());
    expect_close(out, 1e-3, "attention");
    expect_close(key0, 1e-3, "attention key 0");
    expect_close(last, 1e-3, "attention last row");
    auto factors = both(std::vector<float>{1.0f, 0.5f, 1.5f, 2.0f, 1.0f, 0.7f, 1.2f, 0.9f, 1.1f});
    ref_.add_key0_correction(out.ref.data(), q_width, tokens, heads, kv_heads, head_dim, key0.ref.data(),
                             factors.ref.data(), v.ref.data(), kv_width);
    gpu_->add_key0_correction(out.gpu.data(), q_width, tokens, heads, kv_heads, head_dim, key0.gpu.data(),
                              factors.gpu.data(), v.gpu.data(), kv_width);
    expect_close(out, 1e-3, "add_key0_correction");
  }

  const std::size_t qkv_width = q_width + 2 * kv_width;
  auto qkv = both(random_floats(std::size_t{keys} * qkv_width, 1.0f, 8));
  auto rows = both(std::vector<float>(std::size_t{heads} * keys));
  ref_.last_query_rows(qkv.ref.data(), qkv_width, keys, heads, kv_heads, head_dim, q_width, rows.ref.data());
  gpu_->last_query_rows(qkv.gpu.data(), qkv_width, keys, heads, kv_heads, head_dim, q_width, rows.gpu.data());
  expect_close(rows, 1e-5, "last_query_rows");

  const int hidden = 48;
  auto normed = both(random_floats(std::size_t{keys} * hidden, 1.0f, 9));
  auto column = both(random_floats(kv_width, 1.0f, 10));
  ref_.add_channel_column(qkv.ref.data(), qkv_width, keys, q_width, static_cast<int>(kv_width), normed.ref.data(),
                          hidden, 5, 3.0, column.ref.data());
  gpu_->add_channel_column(qkv.gpu.data(), qkv_width, keys, q_width, static_cast<int>(kv_width), normed.gpu.data(),
                           hidden, 5, 3.0, column.gpu.data());
  expect_close(qkv, 1e-6, "add_channel_column");
}

// A prefill-sized call takes the cuBLAS body (TF32 products: inputs rounded
// to 10 significant bits, hence 5e-3), with a window and both readouts: one
// query block with GQA, several query blocks (the body takes 512 queries at a
// time against the keys the block's last query sees) with GQA and without
// (one product over all heads).
TEST_F(DeviceOpsTest, PrefillAttentionThroughCublasMatchesTheReference) {
  struct Shape {
    int tokens, past, heads, kv_heads;
  };
  const int head_dim = 128;
  for (const Shape shape : {Shape{100, 60, 8, 2}, Shape{1100, 30, 8, 2}, Shape{1030, 0, 4, 4}}) {
    SCOPED_TRACE("tokens " + std::to_string(shape.tokens) + ", heads " + std::to_string(shape.heads) + "/" +
                 std::to_string(shape.kv_heads));
    const std::size_t tokens = shape.tokens, heads = shape.heads, keys = shape.past + shape.tokens;
    const std::size_t q_width = heads * head_dim, kv_width = std::size_t(shape.kv_heads) * head_dim;
    auto q = both(random_floats(tokens * q_width, 1.0f, 12));
    auto k = both(random_floats(keys * kv_width, 1.0f, 13));
    auto v = both(random_floats(keys * kv_width, 1.0f, 14));
    for (int window : {0, 50}) {
      auto out = both(std::vector<float>(tokens * q_width));
      auto key0 = both(std::vector<float>(heads * tokens));
      auto last = both(std::vector<float>(heads * keys));
      ref_.attention(q.ref.data(), q_width, k.ref.data(), v.ref.data(), kv_width, shape.tokens, shape.past,
                     shape.heads, shape.kv_heads, head_dim, window, 0.088f, out.ref.data(), q_width, key0.ref.data(),
                     last.ref.data());
      gpu_->attention(q.gpu.data(), q_width, k.gpu.data(), v.gpu.data(), kv_width, shape.tokens, shape.past,
                      shape.heads, shape.kv_heads, head_dim, window, 0.088f, out.gpu.data(), q_width,
                      key0.gpu.data(), last.gpu.data());
      expect_close(out, 5e-3, "attention (cuBLAS)");
      expect_close(key0, 5e-3, "attention (cuBLAS) key 0");
      expect_close(last, 5e-3, "attention (cuBLAS) last row");
    }
  }
}

TEST_F(DeviceOpsTest, ScoringFindsTheFirstMaximumAndTheGoldLogProbability) {
  const int rows = 5, vocab = 1000;
  std::vector<float> logits = random_floats(std::size_t{rows} * vocab, 8.0f, 11);
  logits[2 * vocab + 10] = logits[2 * vocab + 700] = 50.0f;  // a tie: the first index wins
  auto l = both(logits);
  auto gold = both(std::vector<std::int32_t>{0, 999, 700, 5, 123});
  auto argmax = both(std::vector<std::int32_t>(rows));
  auto logprob = both(std::vector<double>(rows));
  ref_.score_rows(l.ref.data(), rows, vocab, gold.ref.data(), argmax.ref.data(), logprob.ref.data());
  gpu_->score_rows(l.gpu.data(), rows, vocab, gold.gpu.data(), argmax.gpu.data(), logprob.gpu.data());
  expect_close(argmax, 0.0, "score_rows argmax");
  expect_close(logprob, 1e-9, "score_rows logprob");
}

}  // namespace
}  // namespace midtune::engine::batched
