// A model runs at its own precision: a tiny random Llama whose matrices are
// all F32 (then the same weights rounded to F16 and to BF16) gives the
// last-position logits of a plain fp32 forward pass over the weights the file
// holds, computed here in double precision (reference_forward below: the
// numpy reference of tests/reference/make_logits_fixtures.py, written out in
// C++ so the test needs nothing outside the repository), on every ISA this CPU
// runs. Shapes with tails: hidden 72 and ffn 100 (not multiples of 32),
// vocabulary 45 (not a multiple of 16), head dimension 18.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/engine/model.hpp"
#include "backends/engine/ops/fp16.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"

namespace midtune::engine {
namespace {

constexpr int kHidden = 72, kHeads = 4, kKvHeads = 2, kHeadDim = kHidden / kHeads, kFfn = 100, kLayers = 2,
              kVocab = 45;
constexpr double kEps = 1e-5, kBase = 10000.0;
constexpr std::uint32_t kF32 = 0, kF16 = 1, kBF16 = 30;

using Matrix = std::vector<float>;  // row-major [rows][cols]

std::uint16_t to_bf16(float v) {  // round to nearest even
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The weights as the file holds them (matrices rounded to the file's type;
// norm weights stay F32, as llama.cpp writes them) and the file's bytes.
struct FloatLlama {
  std::map<std::string, Matrix> w;
  std::vector<std::uint8_t> bytes;
};

FloatLlama make_model(std::uint32_t matrix_type) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  testing::TinyGgufWriter writer;
  writer.add_string("general.architecture", "llama");
  writer.add_u32("llama.block_count", kLayers);
  writer.add_u32("llama.context_length", 128);
  writer.add_u32("llama.embedding_length", kHidden);
  writer.add_u32("llama.feed_forward_length", kFfn);
  writer.add_u32("llama.attention.head_count", kHeads);
  writer.add_u32("llama.attention.head_count_kv", kKvHeads);
  writer.add_f32("llama.rope.freq_base", static_cast<float>(kBase));
  writer.add_f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(kEps));
  writer.add_u32("llama.vocab_size", kVocab);
  FloatLlama model;
  auto add = [&](const std::string& name, int rows, int cols, float scale, float offset, std::uint32_t type) {
    Matrix values(static_cast<std::size_t>(rows) * cols);
    std::vector<std::uint8_t> data(values.size() * (type == kF32 ? 4 : 2));
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float v = offset + scale * normal(rng);
      if (type == kF32) {
        values[i] = v;
        std::memcpy(&data[i * 4], &v, 4);
      } else {
        const std::uint16_t h = type == kF16 ? float_to_fp16(v) : to_bf16(v);
        values[i] = type == kF16 ? fp16_to_float(h) : bf16_to_float(h);
        std::memcpy(&data[i * 2], &h, 2);
      }
    }
    std::vector<std::uint64_t> dims = {static_cast<std::uint64_t>(cols)};
    if (rows > 1) dims.push_back(static_cast<std::uint64_t>(rows));
    writer.add_tensor(name, dims, type, std::move(data));
    model.w[name] = std::move(values);
  };
  const float proj = 1.0f / std::sqrt(static_cast<float>(kHidden));
  add("token_embd.weight", kVocab, kHidden, 1.0f, 0.0f, matrix_type);
  add("output_norm.weight", 1, kHidden, 0.1f, 1.0f, kF32);
  add("output.weight", kVocab, kHidden, proj, 0.0f, matrix_type);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", 1, kHidden, 0.1f, 1.0f, kF32);
    add(p + "ffn_norm.weight", 1, kHidden, 0.1f, 1.0f, kF32);
    add(p + "attn_q.weight", kHidden, kHidden, proj, 0.0f, matrix_type);
    add(p + "attn_k.weight", kKvHeads * kHeadDim, kHidden, proj, 0.0f, matrix_type);
    add(p + "attn_v.weight", kKvHeads * kHeadDim, kHidden, proj, 0.0f, matrix_type);
    add(p + "attn_output.weight", kHidden, kHidden, proj, 0.0f, matrix_type);
    add(p + "ffn_gate.weight", kFfn, kHidden, proj, 0.0f, matrix_type);
    add(p + "ffn_up.weight", kFfn, kHidden, proj, 0.0f, matrix_type);
    add(p + "ffn_down.weight", kHidden, kFfn, 1.0f / std::sqrt(static_cast<float>(kFfn)), 0.0f, matrix_type);
  }
  model.bytes = writer.bytes();
  return model;
}

using Vec = std::vector<double>;

Vec matvec(const Matrix& m, const Vec& x, int rows) {
  const std::size_t cols = x.size();
  Vec y(static_cast<std::size_t>(rows), 0.0);
  for (int r = 0; r < rows; ++r) {
    for (std::size_t k = 0; k < cols; ++k) y[r] += static_cast<double>(m[r * cols + k]) * x[k];
  }
  return y;
}

Vec rms_norm(const Vec& x, const Matrix& weight) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + kEps);
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * weight[i];
  return y;
}

// ggml's NORM RoPE of the llama architecture: adjacent pairs (x[2i], x[2i+1])
// turned by pos * base^(-2i / head_dim).
void rope(double* x, int pos) {
  for (int i = 0; i < kHeadDim / 2; ++i) {
    const double angle = pos * std::pow(kBase, -2.0 * i / kHeadDim);
    const double c = std::cos(angle), s = std::sin(angle), a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

// Last-position logits of the plain forward pass (as the numpy reference).
Vec reference_forward(const std::map<std::string, Matrix>& w, const std::vector<std::int32_t>& tokens) {
  const int T = static_cast<int>(tokens.size());
  std::vector<Vec> h(T, Vec(kHidden));
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < kHidden; ++i) h[t][i] = w.at("token_embd.weight")[tokens[t] * kHidden + i];
  }
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    std::vector<Vec> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const Vec x = rms_norm(h[t], w.at(p + "attn_norm.weight"));
      q[t] = matvec(w.at(p + "attn_q.weight"), x, kHidden);
      k[t] = matvec(w.at(p + "attn_k.weight"), x, kKvHeads * kHeadDim);
      v[t] = matvec(w.at(p + "attn_v.weight"), x, kKvHeads * kHeadDim);
      for (int hd = 0; hd < kHeads; ++hd) rope(q[t].data() + hd * kHeadDim, t);
      for (int g = 0; g < kKvHeads; ++g) rope(k[t].data() + g * kHeadDim, t);
    }
    for (int t = 0; t < T; ++t) {
      Vec att(kHidden, 0.0);
      for (int hd = 0; hd < kHeads; ++hd) {
        const int g = hd / (kHeads / kKvHeads);
        Vec score(t + 1);
        for (int s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int i = 0; i < kHeadDim; ++i) dot += q[t][hd * kHeadDim + i] * k[s][g * kHeadDim + i];
          score[s] = dot / std::sqrt(static_cast<double>(kHeadDim));
        }
        const double top = *std::max_element(score.begin(), score.end());
        double sum = 0.0;
        for (double& s : score) sum += (s = std::exp(s - top));
        for (int s = 0; s <= t; ++s) {
          for (int i = 0; i < kHeadDim; ++i) att[hd * kHeadDim + i] += score[s] / sum * v[s][g * kHeadDim + i];
        }
      }
      const Vec o = matvec(w.at(p + "attn_output.weight"), att, kHidden);
      for (int i = 0; i < kHidden; ++i) h[t][i] += o[i];
      const Vec x = rms_norm(h[t], w.at(p + "ffn_norm.weight"));
      const Vec gate = matvec(w.at(p + "ffn_gate.weight"), x, kFfn), up = matvec(w.at(p + "ffn_up.weight"), x, kFfn);
      Vec act(kFfn);
      for (int i = 0; i < kFfn; ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const Vec down = matvec(w.at(p + "ffn_down.weight"), act, kHidden);
      for (int i = 0; i < kHidden; ++i) h[t][i] += down[i];
    }
  }
  return matvec(w.at("output.weight"), rms_norm(h[T - 1], w.at("output_norm.weight")), kVocab);
}

// Worst |engine - reference| over the logits, relative to the largest
// reference logit.
double worst_relative_difference(const std::vector<float>& got, const Vec& want) {
  double scale = 0.0, worst = 0.0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst / scale;
}

class FloatModel : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(FloatModel, LastLogitsMatchTheFp32ReferenceOfTheSameWeightsOnEveryIsa) {
  const FloatLlama model = make_model(GetParam());
  testing::MemoryFile file(model.bytes);
  // 15 tokens: two whole 6-token AVX2 sub-tiles (one 12-token AVX-512 one)
  // plus single-token remainders.
  const std::vector<std::int32_t> tokens = {1, 5, 7, 44, 0, 12, 3, 3, 8, 21, 30, 17, 40, 2, 9};
  const Vec want = reference_forward(model.w, tokens);
  int ran = 0;
  for (Isa isa : kAllIsas) {
    if (!isa_available(isa)) continue;
    ++ran;
    Model engine(file.path(), isa);
    EXPECT_EQ(engine.config().hidden, static_cast<std::uint32_t>(kHidden));
    EXPECT_FALSE(engine.config().tied_output);
    const int last = static_cast<int>(tokens.size()) - 1;
    // The whole prompt in one call (prefill tiles) ...
    Sequence one_pass(engine, static_cast<int>(tokens.size()), SequenceScales::ones(kLayers, kHeads));
    const std::vector<float> prefill = engine.forward(one_pass, tokens, {}, std::span<const int>(&last, 1));
    // ... and token by token (the decode kernel).
    Sequence stepwise(engine, static_cast<int>(tokens.size()), SequenceScales::ones(kLayers, kHeads));
    std::vector<float> decode;
    const int zero = 0;
    for (std::int32_t token : tokens) {
      decode = engine.forward(stepwise, std::span<const std::int32_t>(&token, 1), {}, std::span<const int>(&zero, 1));
    }
    ASSERT_EQ(prefill.size(), static_cast<std::size_t>(kVocab));
    // fp32 throughout: a few ulps of error per op, far below the 1e-4 an
    // int8 path misses by (about 1e-2 here). BF16 weights under avx512bf16
    // round every matmul's activations to bf16 (ops/float_matmul.hpp):
    // measured 2.7e-3 (the other paths 2-5e-7), stated bound 1e-2.
    const bool bf16_products = GetParam() == kBF16 && isa == Isa::avx512bf16;
    const double difference = worst_relative_difference(prefill, want);
    std::printf("%s %s: worst logit difference %.2e of the largest logit\n", to_string(isa),
                GetParam() == kF32 ? "F32" : GetParam() == kF16 ? "F16" : "BF16", difference);
    EXPECT_LT(difference, bf16_products ? 1e-2 : 1e-5) << to_string(isa) << " prefill";
    // Rows are independent in the float kernels, as in the int8 ones.
    EXPECT_EQ(decode, prefill) << to_string(isa) << ": decode differs from the one-pass prefill";
  }
  EXPECT_GE(ran, 1);
}

INSTANTIATE_TEST_SUITE_P(MatrixTypes, FloatModel, ::testing::Values(kF32, kF16, kBF16), [](const auto& info) {
  return std::string(info.param == kF32 ? "F32" : info.param == kF16 ? "F16" : "BF16");
});

}  // namespace
}  // namespace midtune::engine
