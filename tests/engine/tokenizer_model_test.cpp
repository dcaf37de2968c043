// The tokenizer and chat template on the real SmolLM2 vocabulary, against
// llama.cpp's ids and the GGUF's Jinja template rendered by jinja2
// (fixture made by tests/reference/make_tokenizer_fixtures.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/engine/gguf/chat_template.hpp"
#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/gguf/tokenizer.hpp"
#include "tests/engine/model_path.hpp"
#include "tests/test_paths.hpp"

namespace midtune {
namespace {

nlohmann::json load_fixture() {
  const std::string path = midtune::testing::source_dir() + "/tests/engine/fixtures/tokenizer_smollm2.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = testing::test_model_path();
    if (path.empty()) GTEST_SKIP() << "model absent (set MIDTUNE_MODEL)";
    fixture_ = load_fixture();
    ASSERT_EQ(path.filename().string(), fixture_["model_file"].get<std::string>());
    file_.emplace(path);
    tokenizer_.emplace(Tokenizer::from_gguf(*file_));
  }
  nlohmann::json fixture_;
  std::optional<GgufFile> file_;
  std::optional<Tokenizer> tokenizer_;
};

TEST_F(SmolLM2Tokenizer, IdsMatchLlamaCppOnTheWholeCorpus) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.kind(), TokenizerKind::byte_level_bpe);
  EXPECT_EQ(t.vocab_size(), 49152u);
  EXPECT_EQ(t.bos(), fixture_["bos"].get<int>());
  EXPECT_EQ(t.eos(), fixture_["eos"].get<int>());
  EXPECT_FALSE(t.add_bos_default());
  EXPECT_TRUE(t.is_end_of_generation(*t.find_token("<|im_end|>")));
  int cases = 0;
  int lossy = 0;
  for (const auto& c : fixture_["cases"]) {
    const auto text = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<std::int32_t>>();
    const auto ids = t.encode(text);
    EXPECT_EQ(ids, expected) << c["name"];
    if (c.contains("detokenized_hex")) {
      // Bytes the vocabulary cannot represent are dropped, as by llama.cpp.
      EXPECT_EQ(t.decode(ids), from_hex(c["detokenized_hex"].get<std::string>())) << c["name"];
      ++lossy;
    } else {
      EXPECT_EQ(t.decode(ids), text) << c["name"];
      // Offsets tile the input: every byte belongs to exactly one token.
      std::size_t at = 0;
      for (const auto& tok : t.encode_with_offsets(text)) {
        EXPECT_EQ(tok.begin, at) << c["name"];
        at = tok.end;
      }
      EXPECT_EQ(at, text.size()) << c["name"];
    }
    ++cases;
  }
  EXPECT_GE(cases, 70);
  EXPECT_GE(lossy, 1);
  for (const auto& c : fixture_["cases_special_as_text"]) {
    const auto text = c["text"].get<std::string>();
    const auto ids = t.encode(text, false, /*parse_special=*/false);
    EXPECT_EQ(ids, c["ids"].get<std::vector<std::int32_t>>()) << c["name"];
    EXPECT_EQ(t.decode(ids), text) << c["name"];
    ++cases;
  }
  EXPECT_GE(cases, 74);
}

TEST_F(SmolLM2Tokenizer, ChatTemplateMatchesJinjaRendering) {
  const ChatTemplate chat = ChatTemplate::from_gguf(*file_);
  EXPECT_EQ(chat.format(), ChatFormat::chatml);
  ASSERT_TRUE(chat.default_system().has_value());
  EXPECT_EQ(*chat.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  for (const auto& c : fixture_["chat_template"]) {
    const auto content = c["content"].get<std::string>();
    const RenderedPrompt p = chat.render_user(content);
    EXPECT_EQ(p.text, c["rendered"].get<std::string>());
    EXPECT_EQ(p.text.substr(p.content_begin, p.content_end - p.content_begin), content);
    EXPECT_EQ(tokenizer_->encode(p.text), c["ids"].get<std::vector<std::int32_t>>());
  }
}

TEST_F(SmolLM2Tokenizer, HashIsStableAndNamesTheVocabulary) {
  EXPECT_EQ(tokenizer_->hash(), Tokenizer::from_gguf(*file_).hash());
  EXPECT_EQ(tokenizer_->hash().rfind("fnv1a64:", 0), 0u);
}

}  // namespace
}  // namespace midtune
