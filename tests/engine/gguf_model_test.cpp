// The GGUF reader on the real SmolLM2-135M-Instruct Q4_1 file.
#include <gtest/gtest.h>

#include "backends/engine/gguf/gguf.hpp"
#include "tests/engine/model_path.hpp"

namespace midtune {
namespace {

TEST(GgufModel, SmolLM2ConfigAndTensors) {
  const auto path = testing::test_model_path();
  if (path.empty()) GTEST_SKIP() << "model absent (set MIDTUNE_MODEL)";
  GgufFile f(path);
  EXPECT_EQ(f.file_size(), 98362432u);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);

  const ModelConfig c = read_model_config(f);
  // attention_scale: 1 / sqrt(head_dim).
  const ModelConfig expected{.arch = "llama",
                             .layers = 30,
                             .heads = 9,
                             .kv_heads = 3,
                             .head_dim = 64,
                             .hidden = 576,
                             .ffn = 1536,
                             .rope_dims = 64,
                             .rope_base = 100000.0f,
                             .rms_eps = 1e-5f,
                             .context_length = 8192,
                             .vocab = 49152,
                             .tied_output = true,
                             .attention_scale = 0.125f,
                             .local_layers = {}};
  EXPECT_EQ(c, expected);

  const auto& embd = f.tensor("token_embd.weight");
  ASSERT_NE(embd.type, nullptr);
  EXPECT_EQ(embd.type->type, GgmlType::Q8_0);
  EXPECT_EQ(embd.dims, (std::vector<std::uint64_t>{576, 49152}));
  EXPECT_EQ(embd.n_bytes, 576u * 49152u / 32u * 34u);
  const auto& up = f.tensor("blk.29.ffn_up.weight");
  EXPECT_EQ(up.type->type, GgmlType::Q4_1);
  EXPECT_EQ(up.dims, (std::vector<std::uint64_t>{576, 1536}));
  EXPECT_EQ(f.tensor("output_norm.weight").type->type, GgmlType::F32);

  // Tensors tile the data section: each one's bytes are inside the file and
  // the last one ends at the end of the file.
  std::uint64_t end = 0;
  for (const auto& t : f.tensors()) {
    ASSERT_NE(t.type, nullptr) << t.name;
    EXPECT_EQ(f.tensor_data(t).size(), t.n_bytes);
    end = std::max(end, f.data_offset() + t.offset + t.n_bytes);
  }
  EXPECT_EQ(end, f.file_size());
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
}

}  // namespace
}  // namespace midtune
