// GGUF reader on small files this test writes itself: a valid file parses,
// and every corruption (truncations, random bytes, huge counts and lengths,
// bad magic/version, offsets past EOF) gives GgufError, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>

#include "backends/engine/gguf/gguf.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"

namespace midtune {
namespace {

using ::testing::HasSubstr;
using testing::TinyGgufWriter;

std::vector<std::uint8_t> filled(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

TinyGgufWriter tiny_llama() {
  TinyGgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("general.alignment", 32);
  w.add_u32("llama.block_count", 2);
  w.add_u32("llama.context_length", 256);
  w.add_u32("llama.embedding_length", 64);
  w.add_u32("llama.feed_forward_length", 128);
  w.add_u32("llama.attention.head_count", 4);
  w.add_u32("llama.attention.head_count_kv", 2);
  w.add_f32("llama.rope.freq_base", 50000.0f);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b", "ab", "\xe2\x96\x81", "c"});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1});
  w.add_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -0.5f, -3, -4});
  w.add_f64("test.f64", 2.5);
  w.add_u64("test.u64", 1ull << 40);
  w.add_i32("test.negative", -7);
  w.add_tensor("token_embd.weight", {64, 8}, 3 /*Q4_1*/, filled(64 / 32 * 20 * 8, 1));
  w.add_tensor("output_norm.weight", {64}, 0 /*F32*/, filled(64 * 4, 2));
  w.add_tensor("blk.0.attn_q.weight", {64, 64}, 1 /*F16*/, filled(64 * 64 * 2, 3));
  w.add_tensor("blk.0.ffn_down.weight", {256, 2}, 14 /*Q6_K*/, filled(2 * 210, 4));
  return w;
}

class GgufReaderTest : public ::testing::Test {
 protected:
  std::filesystem::path file(const std::string& name) {
    auto p = std::filesystem::temp_directory_path() /
             ("midtune_gguf_" + std::to_string(::getpid()) + "_" + name + ".gguf");
    created_.push_back(p);
    return p;
  }
  void TearDown() override {
    for (const auto& p : created_) std::filesystem::remove(p);
  }
  // Expects GgufError, whose message names the file, when `bytes` is opened.
  static std::string expect_error(const std::vector<std::uint8_t>& bytes, const std::string& name) {
    const testing::MemoryFile file(bytes);
    try {
      GgufFile f(file.path());
    } catch (const GgufError& e) {
      EXPECT_THAT(e.what(), HasSubstr(file.path().string()));
      return e.what();
    }
    ADD_FAILURE() << name << ": no GgufError";
    return {};
  }
  std::vector<std::filesystem::path> created_;
};

TEST_F(GgufReaderTest, ParsesValidFileMetadataTensorsAndConfig) {
  TinyGgufWriter::Layout layout;
  const auto bytes = tiny_llama().bytes(&layout);
  const auto path = file("valid");
  TinyGgufWriter::write(path, bytes);
  GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), layout.data_at);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.block_count"), 2u);
  EXPECT_EQ(f.get_int("test.negative"), -7);
  EXPECT_DOUBLE_EQ(f.get_float("test.f64"), 2.5);
  EXPECT_EQ(f.get_uint("test.u64"), 1ull << 40);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").at(6), "\xe2\x96\x81");
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").at(1), 3);
  EXPECT_FLOAT_EQ(f.get_float_array("tokenizer.ggml.scores").at(5), -0.5f);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->type_name(), "ARRAY[STRING]");

  ASSERT_EQ(f.tensors().size(), 4u);
  const auto& embd = f.tensor("token_embd.weight");
  EXPECT_EQ(embd.type->type, GgmlType::Q4_1);
  EXPECT_EQ(embd.n_elements, 512u);
  EXPECT_EQ(embd.rows(), 8u);
  EXPECT_EQ(embd.n_bytes, 320u);
  const auto data = f.tensor_data(embd);
  EXPECT_EQ(data.size(), 320u);
  EXPECT_EQ(std::to_integer<int>(data[1]), 8);  // filled(.., 1)[1] = 1 + 7
  const auto& q6 = f.tensor("blk.0.ffn_down.weight");
  EXPECT_EQ(q6.n_bytes, 420u);
  EXPECT_EQ(std::to_integer<int>(f.tensor_data(q6)[0]), 4);

  const ModelConfig c = read_model_config(f);
  // No llama.vocab_size: vocab comes from the token list; no output.weight: tied.
  const ModelConfig expected{.arch = "llama", .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16,
                             .hidden = 64, .ffn = 128, .rope_dims = 16, .rope_base = 50000.0f,
                             .rms_eps = 1e-6f, .context_length = 256, .vocab = 8, .tied_output = true,
                             .attention_scale = 0.25f};  // 1 / sqrt(head_dim)
  EXPECT_EQ(c, expected);
}

// The benchmarks write random models larger than memory tensor by tensor
// (bench/cuda_bench_cli --shape llama70b): that file must be byte for byte
// the one bytes() makes, tensors made later sitting where eager ones would.
TEST_F(GgufReaderTest, StreamedWritingGivesTheSameFile) {
  TinyGgufWriter w = tiny_llama();
  w.add_tensor_made_later("blk.1.attn_q.weight", {64, 3}, 0 /*F32*/, 64 * 3 * 4, [] { return filled(64 * 3 * 4, 5); });
  w.add_tensor("blk.1.attn_k.weight", {64, 1}, 0 /*F32*/, filled(64 * 4, 6));
  const auto path = file("streamed");
  w.write_streamed(path);
  std::ifstream in(path, std::ios::binary);
  const std::vector<std::uint8_t> streamed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(streamed, w.bytes());
  const GgufFile f(path);
  ASSERT_NE(f.find_tensor("blk.1.attn_q.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.1.attn_q.weight")->n_bytes, 64u * 3 * 4);
  // A made-later tensor whose maker breaks its promised size is refused.
  w.add_tensor_made_later("blk.1.attn_v.weight", {64, 1}, 0, 64 * 4, [] { return filled(8, 7); });
  EXPECT_THROW(w.write_streamed(file("broken")), std::logic_error);
}

TEST_F(GgufReaderTest, GettersNameMissingKeysAndWrongTypes) {
  const auto path = file("getters");
  TinyGgufWriter::write(path, tiny_llama().bytes());
  GgufFile f(path);
  EXPECT_THROW(f.get_uint("no.such.key"), GgufError);
  try {
    f.get_string("llama.block_count");
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_THAT(e.what(), HasSubstr("llama.block_count"));
    EXPECT_THAT(e.what(), HasSubstr("UINT32"));
  }
  EXPECT_THROW(f.get_uint("test.negative"), GgufError);
  EXPECT_THROW(f.get_float("llama.block_count"), GgufError);
  EXPECT_THROW(f.get_bool("llama.block_count"), GgufError);
  EXPECT_THROW(f.get_string("tokenizer.ggml.tokens"), GgufError);  // array, not scalar
  EXPECT_THROW(f.get_string_array("general.architecture"), GgufError);
  EXPECT_THROW(f.get_float_array("tokenizer.ggml.token_type"), GgufError);
  EXPECT_THROW(f.get_int_array("tokenizer.ggml.tokens"), GgufError);
  EXPECT_EQ(f.get_uint_or("absent", 5), 5u);
  EXPECT_THROW(f.get_uint_or("general.architecture", 5), GgufError);
  EXPECT_THROW(f.tensor("output.weight"), GgufError);
}

TEST_F(GgufReaderTest, EveryTruncationIsAnError) {
  TinyGgufWriter::Layout layout;
  const auto bytes = tiny_llama().bytes(&layout);
  int checked = 0;
  for (std::size_t n = 0; n < bytes.size(); n += (n < layout.data_at ? 1 : 13)) {
    const std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    const auto msg = expect_error(cut, "cut");
    EXPECT_THAT(msg, HasSubstr("byte offset")) << "cut at " << n;
    ++checked;
  }
  EXPECT_GT(checked, static_cast<int>(layout.data_at));
}

TEST_F(GgufReaderTest, RandomByteCorruptionNeverCrashes) {
  const auto bytes = tiny_llama().bytes();
  std::mt19937 rng(1234);
  int errors = 0;
  for (int trial = 0; trial < 600; ++trial) {
    auto bad = bytes;
    const int flips = 1 + trial % 4;
    for (int k = 0; k < flips; ++k) {
      // Mostly the header, where a flip changes structure.
      const std::size_t limit = trial % 5 == 0 ? bad.size() : std::min<std::size_t>(bad.size(), 900);
      bad[rng() % limit] = static_cast<std::uint8_t>(rng());
    }
    const testing::MemoryFile file(bad);
    try {
      GgufFile f(file.path());
      for (const auto& t : f.tensors()) {
        if (t.type) {
          ASSERT_LE(f.data_offset() + t.offset + t.n_bytes, f.file_size());
        }
      }
      (void)read_model_config(f);
    } catch (const GgufError&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);  // the corruptions do get detected, not silently accepted

  // Pure noise, and noise behind a valid magic.
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::uint8_t> noise(rng() % 400);
    for (auto& b : noise) b = static_cast<std::uint8_t>(rng());
    if (trial % 2 == 0 && noise.size() >= 8) {
      std::memcpy(noise.data(), "GGUF\x03\0\0\0", 8);
    }
    expect_error(noise, "noise");
  }
}

TEST_F(GgufReaderTest, HugeCountsAndLengthsAreErrors) {
  TinyGgufWriter::Layout layout;
  const auto good = tiny_llama().bytes(&layout);
  const std::uint64_t huge_values[] = {1ull << 62, ~0ull, static_cast<std::uint64_t>(good.size())};
  for (const std::uint64_t huge : huge_values) {
    auto b = good;
    TinyGgufWriter::patch_u64(b, layout.kv_count_at, huge);
    EXPECT_THAT(expect_error(b, "kvcount"), HasSubstr("metadata count"));

    b = good;
    TinyGgufWriter::patch_u64(b, layout.tensor_count_at, huge);
    expect_error(b, "tcount");

    b = good;  // length of the first key
    TinyGgufWriter::patch_u64(b, layout.kv_at[0], huge);
    EXPECT_THAT(expect_error(b, "keylen"), HasSubstr("metadata key length"));

    b = good;  // length of the first value ("llama"): key(8+20) + type(4)
    TinyGgufWriter::patch_u64(b, layout.kv_at[0] + 8 + 20 + 4, huge);
    EXPECT_THAT(expect_error(b, "strlen"), HasSubstr("string value length"));

    b = good;  // length of the tokens array: key(8+20) + type(4) + elem type(4)
    TinyGgufWriter::patch_u64(b, layout.kv_at[11] + 8 + 21 + 4 + 4, huge);
    EXPECT_THAT(expect_error(b, "arrlen"), HasSubstr("array length"));

    b = good;  // first dimension of token_embd.weight: name(8+17) + n_dims(4)
    TinyGgufWriter::patch_u64(b, layout.tensor_info_at[0] + 8 + 17 + 4, huge);
    expect_error(b, "dim");

    b = good;  // data offset of token_embd.weight, rounded to the alignment
    TinyGgufWriter::patch_u64(b, layout.tensor_info_at[0] + 8 + 17 + 4 + 16 + 4, huge & ~31ull);
    EXPECT_THAT(expect_error(b, "offset"), HasSubstr("outside"));
  }
}

TEST_F(GgufReaderTest, StructuralErrorsAreNamed) {
  TinyGgufWriter::Layout layout;
  const auto good = tiny_llama().bytes(&layout);
  const std::size_t embd_info = layout.tensor_info_at[0] + 8 + 17;  // n_dims of token_embd.weight

  auto b = good;
  b[0] = 'X';
  EXPECT_THAT(expect_error(b, "magic"), HasSubstr("magic"));

  b = good;
  TinyGgufWriter::patch_u32(b, 4, 2);
  EXPECT_THAT(expect_error(b, "version"), HasSubstr("version 2"));

  b = good;
  TinyGgufWriter::patch_u32(b, 4, 0x03000000u);
  EXPECT_THAT(expect_error(b, "endian"), HasSubstr("big-endian"));

  b = good;
  TinyGgufWriter::patch_u32(b, embd_info, 5);
  EXPECT_THAT(expect_error(b, "ndims"), HasSubstr("dimensions"));

  b = good;
  TinyGgufWriter::patch_u32(b, embd_info, 0);
  expect_error(b, "ndims0");

  b = good;  // data offset not aligned
  TinyGgufWriter::patch_u64(b, embd_info + 4 + 16 + 4, 3);
  EXPECT_THAT(expect_error(b, "unaligned"), HasSubstr("alignment"));

  b = good;  // value type of the first pair
  TinyGgufWriter::patch_u32(b, layout.kv_at[0] + 8 + 20, 99);
  EXPECT_THAT(expect_error(b, "vtype"), HasSubstr("unknown value type"));

  b = good;  // row length not a multiple of the Q4_1 block: dims[0] = 48
  TinyGgufWriter::patch_u64(b, embd_info + 4, 48);
  EXPECT_THAT(expect_error(b, "block"), HasSubstr("block size"));

  b = good;  // last tensor offset moved one alignment unit past EOF
  const std::size_t q6_info = layout.tensor_info_at[3] + 8 + 21;
  TinyGgufWriter::patch_u64(b, q6_info + 4 + 16 + 4, (b.size() - layout.data_at + 31) / 32 * 32);
  EXPECT_THAT(expect_error(b, "pasteof"), HasSubstr("blk.0.ffn_down.weight"));

  b = good;  // general.alignment = 24
  TinyGgufWriter::patch_u32(b, layout.kv_at[1] + 8 + 17 + 4, 24);
  EXPECT_THAT(expect_error(b, "align"), HasSubstr("power of two"));

  expect_error({}, "empty");
  EXPECT_THROW(GgufFile("/nonexistent/dir/model.gguf"), GgufError);
}

TEST_F(GgufReaderTest, UnsupportedTensorTypeIsAnErrorOnUse) {
  auto w = tiny_llama();
  w.add_tensor("blk.0.attn_k.weight", {32, 2}, 16 /*IQ2_XXS*/, filled(44, 5));
  const auto path = file("q5");
  TinyGgufWriter::write(path, w.bytes());
  GgufFile f(path);
  const auto& t = f.tensor("blk.0.attn_k.weight");
  EXPECT_EQ(t.type, nullptr);
  try {
    (void)f.tensor_data(t);
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_THAT(e.what(), HasSubstr("type#16"));
    EXPECT_THAT(e.what(), HasSubstr("blk.0.attn_k.weight"));
  }
  EXPECT_THROW(ggml_type_info(static_cast<GgmlType>(16)), GgufError);
  EXPECT_EQ(ggml_type_info(GgmlType::Q4_K).block_bytes, 144u);
}

TEST_F(GgufReaderTest, ControlBytesInNamesAreEscapedInMessages) {
  // A key that clears the screen and a tensor name with a newline: printed
  // raw they would hide the message or fake a second line of it.
  auto w = tiny_llama();
  w.add_u32("evil\x1b[2J.key", 1);
  w.add_u32("evil\x1b[2J.key", 2);
  const std::string duplicate = expect_error(w.bytes(), "duplicate key");
  EXPECT_THAT(duplicate, HasSubstr("duplicate metadata key 'evil\\x1b[2J.key'"));
  EXPECT_EQ(duplicate.find('\x1b'), std::string::npos) << duplicate;

  auto t = tiny_llama();
  t.add_tensor("two\nlines", {32, 2}, 16 /*IQ2_XXS*/, filled(44, 5));
  const auto path = file("ctl");
  TinyGgufWriter::write(path, t.bytes());
  GgufFile f(path);
  try {
    (void)f.tensor_data(f.tensor("two\nlines"));
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_THAT(e.what(), HasSubstr("two\\x0alines"));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST_F(GgufReaderTest, InconsistentConfigIsAnError) {
  auto w = tiny_llama();
  w.add_u32("llama.vocab_size", 9);  // token_embd.weight has 8 rows
  const auto path = file("cfg");
  TinyGgufWriter::write(path, w.bytes());
  GgufFile f(path);
  EXPECT_THAT([&] { read_model_config(f); }, ::testing::ThrowsMessage<GgufError>(HasSubstr("token_embd.weight")));
}

}  // namespace
}  // namespace midtune
