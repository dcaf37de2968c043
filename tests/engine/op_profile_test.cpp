// The op profile (Model::set_op_profile; bench/cuda_bench_cli --profile)
// must not change what the model computes on any device, and must count
// each Device op the forward pass ran, where it ran.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/engine/devices/reference/reference_ops.hpp"
#include "backends/engine/model.hpp"
#include "tests/engine/tiny_llama_gguf.hpp"

namespace midtune::engine {
namespace {

using testing::TinyLlama;

std::size_t calls_of(const OpProfile& profile, const std::string& op) {
  for (const OpProfile::Row& row : profile.rows())
    if (row.op == op) return row.calls;
  return 0;
}

std::vector<float> run(Model& model, const std::vector<std::int32_t>& tokens) {
  const ModelConfig& c = model.config();
  Sequence seq(model, static_cast<int>(tokens.size()),
               SequenceScales::ones(static_cast<int>(c.layers), static_cast<int>(c.heads)));
  const int last = static_cast<int>(tokens.size()) - 1;
  return model.forward(seq, tokens, {}, std::span<const int>(&last, 1));
}

TEST(OpProfile, TimesEveryOpOnEveryDeviceWithoutChangingTheLogits) {
  testing::MemoryFile file(TinyLlama{}.bytes());
  const std::vector<std::int32_t> tokens = {1, 5, 7, 39, 0, 12, 3, 3, 8};
  devices::ReferenceOps reference;
  std::vector<std::unique_ptr<Model>> models;
  models.push_back(std::make_unique<Model>(file.path()));             // the CPU engine
  models.push_back(std::make_unique<Model>(file.path(), reference));  // the GPU family's host body
  for (const auto& model : models) {
    SCOPED_TRACE(model->device().name());
    const ModelConfig& c = model->config();
    const std::vector<float> plain = run(*model, tokens);
    OpProfile profile;
    model->set_op_profile(&profile);
    EXPECT_EQ(run(*model, tokens), plain);

    const std::size_t layers = c.layers;
    // A call this short takes the batched attention step, one per layer;
    // with the per-sequence ops the attention op itself.
    EXPECT_EQ(calls_of(profile, "decode_attention"), layers);
    EXPECT_EQ(calls_of(profile, "attention"), 0u);
    model->decode_batch_tokens = 0;
    EXPECT_EQ(run(*model, tokens), plain);
    EXPECT_EQ(calls_of(profile, "attention"), layers);
    model->decode_batch_tokens = 16;
    EXPECT_EQ(calls_of(profile, "embed"), 2u);
    // Per run: two norms per layer and the final norm; a product names its
    // matrix: Q|K|V, the output projection, gate|up, down once per layer,
    // the vocabulary product once.
    EXPECT_EQ(calls_of(profile, "rms_norm_rows"), 2 * (2 * layers + 1));
    const std::size_t qkv_rows = (c.heads + 2 * c.kv_heads) * c.head_dim;
    EXPECT_EQ(calls_of(profile, "matmul " + std::to_string(qkv_rows) + "x" + std::to_string(c.hidden)), 2 * layers);
    EXPECT_EQ(calls_of(profile, "matmul " + std::to_string(2 * c.ffn) + "x" + std::to_string(c.hidden)), 2 * layers);
    EXPECT_EQ(calls_of(profile, "matmul " + std::to_string(c.vocab) + "x" + std::to_string(c.hidden)), 2u);
    const std::vector<OpProfile::Row> rows = profile.rows();
    for (std::size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].seconds, rows[i].seconds) << "largest first";

    profile.reset();
    EXPECT_TRUE(profile.rows().empty());
    model->set_op_profile(nullptr);
    EXPECT_EQ(run(*model, tokens), plain);
    EXPECT_TRUE(profile.rows().empty()) << "no profile: nothing counted";
  }
}

}  // namespace
}  // namespace midtune::engine
