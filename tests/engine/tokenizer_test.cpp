// Tokenizer on tiny vocabularies built here: SentencePiece score merges,
// byte fallback and space prefix; byte-level BPE merge ranks, digit split,
// special tokens; offsets, token spans, decode round trips, bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/gguf/tokenizer.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"
#include "tests/test_paths.hpp"

namespace midtune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kMark = "\xe2\x96\x81";  // U+2581

// <unk> <s> </s>, the 256 byte tokens, then scored pieces.
Vocabulary tiny_spm() {
  Vocabulary v;
  v.model = "llama";
  v.pre = "default";  // what read_vocabulary reports when tokenizer.ggml.pre is absent
  v.source = "tiny-spm";
  const auto add = [&](const std::string& text, TokenType type, float score) {
    v.tokens.push_back(text);
    v.types.push_back(type);
    v.scores.push_back(score);
  };
  add("<unk>", TokenType::unknown, 0);
  add("<s>", TokenType::control, 0);
  add("</s>", TokenType::control, 0);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    add(hex, TokenType::byte, 0);
  }
  for (const char* single : {"h", "e", "l", "o", "w", "r", "d", "a"}) add(single, TokenType::normal, -10);
  add(kMark, TokenType::normal, -10);
  add("he", TokenType::normal, -3);
  add("ll", TokenType::normal, -2);
  add("hell", TokenType::normal, -4);
  add("hello", TokenType::normal, -5);
  add(kMark + "hello", TokenType::normal, -6);
  add(kMark + "w", TokenType::normal, -1);
  add("or", TokenType::normal, -3);
  add(kMark + "wor", TokenType::normal, -4);
  add("ld", TokenType::normal, -7);
  add("aa", TokenType::normal, -1);
  v.bos = 1;
  v.eos = 2;
  v.unk = 0;
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

std::int32_t id_of(const Tokenizer& t, const std::string& text) {
  const auto id = t.find_token(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

TEST(SentencePieceTokenizer, MergesByScoreWithSpacePrefix) {
  const Tokenizer t(tiny_spm());
  EXPECT_EQ(t.kind(), TokenizerKind::sentencepiece_bpe);
  // ll(-2) before he(-3); then hell, hello, ▁hello. ▁w(-1) first, then or, ▁wor; ld.
  EXPECT_THAT(t.encode("hello world"),
              ElementsAre(id_of(t, kMark + "hello"), id_of(t, kMark + "wor"), id_of(t, "ld")));
  EXPECT_THAT(t.encode("hello", /*add_bos=*/true), ElementsAre(1, id_of(t, kMark + "hello")));
  // Equal scores: the leftmost pair merges first.
  EXPECT_THAT(t.encode("aaa"), ElementsAre(id_of(t, kMark), id_of(t, "aa"), id_of(t, "a")));
}

TEST(SentencePieceTokenizer, ByteFallbackAndOffsets) {
  const Tokenizer t(tiny_spm());
  // "é" (C3 A9) is no piece: two byte tokens, ids 3 + byte.
  EXPECT_THAT(t.encode("h\xc3\xa9"), ElementsAre(id_of(t, kMark), id_of(t, "h"), 3 + 0xC3, 3 + 0xA9));
  const auto tokens = t.encode_with_offsets("hello world", true);
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[0], (TokenWithOffsets{1, 0, 0}));                         // BOS: empty
  EXPECT_EQ(tokens[1], (TokenWithOffsets{id_of(t, kMark + "hello"), 0, 5}));  // prefix stands for no byte
  EXPECT_EQ(tokens[2], (TokenWithOffsets{id_of(t, kMark + "wor"), 5, 9}));    // ▁ is the input space
  EXPECT_EQ(tokens[3], (TokenWithOffsets{id_of(t, "ld"), 9, 11}));
}

TEST(SentencePieceTokenizer, SpecialTokensAndRoundTrip) {
  const Tokenizer t(tiny_spm());
  // After a special token the space prefix is added again (llama.cpp).
  EXPECT_THAT(t.encode("</s>hello"), ElementsAre(2, id_of(t, kMark + "hello")));
  EXPECT_THAT(t.encode("</s>", false, /*parse_special=*/false), ::testing::Not(ElementsAre(2)));
  for (const std::string text : {"hello world", " hello", "a  b\n", "h\xc3\xa9llo </s>world", "", "</s>"}) {
    EXPECT_EQ(t.decode(t.encode(text)), text) << text;
  }
  EXPECT_EQ(t.token_piece(3 + 'A'), "A");
  EXPECT_EQ(t.decode(t.encode("</s>hello"), /*render_special=*/false), "hello");
}

// A generated continuation is text after the prompt: its first piece keeps
// its space (decode would drop it as the start of a text), unless the token
// before it is special, where encode adds the prefix again.
TEST(SentencePieceTokenizer, ContinuationKeepsTheFirstPiecesSpace) {
  const Tokenizer t(tiny_spm());
  const std::vector<std::int32_t> world = {id_of(t, kMark + "wor"), id_of(t, "ld")};
  const std::int32_t hello = id_of(t, kMark + "hello");
  EXPECT_EQ(t.decode(world), "world");
  EXPECT_EQ(t.decode_continuation(hello, world), " world");
  EXPECT_EQ(t.decode_continuation(/*<s>*/ 1, world), "world");
  // The same as decoding the whole sequence and removing the prompt's text.
  std::vector<std::int32_t> whole = {1, hello};
  whole.insert(whole.end(), world.begin(), world.end());
  EXPECT_EQ(t.decode(whole), t.decode(std::vector<std::int32_t>{1, hello}) + t.decode_continuation(hello, world));
  EXPECT_THROW(t.decode_continuation(100000, world), TokenizerError);
}

// llama.cpp's ids on a tiny SentencePiece vocabulary, with and without the
// space prefix (fixture from tests/reference/make_tokenizer_fixtures.py).
TEST(SentencePieceTokenizer, MatchesLlamaCppOnTinyVocabulary) {
  std::ifstream in(midtune::testing::source_dir() + "/tests/engine/fixtures/tokenizer_tiny_spm.json");
  ASSERT_TRUE(in) << "fixture missing";
  const auto fixture = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& variant : fixture["variants"]) {
    Vocabulary v;
    v.model = "llama";
    v.tokens = fixture["tokens"].get<std::vector<std::string>>();
    for (const int t : fixture["types"]) v.types.push_back(static_cast<TokenType>(t));
    v.scores = fixture["scores"].get<std::vector<float>>();
    v.bos = fixture["bos"].get<int>();
    v.eos = fixture["eos"].get<int>();
    v.unk = fixture["unk"].get<int>();
    v.add_space_prefix = variant["add_space_prefix"].get<bool>();
    const Tokenizer t(v);
    for (const auto& c : variant["cases"]) {
      const auto text = c["text"].get<std::string>();
      const auto ids = t.encode(text);
      EXPECT_EQ(ids, c["ids"].get<std::vector<std::int32_t>>()) << text << " prefix=" << v.add_space_prefix;
      EXPECT_EQ(t.decode(ids), text) << text << " prefix=" << v.add_space_prefix;
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

// All 256 GPT-2 byte symbols (ids 0..255 in byte order), merged pieces,
// and two control tokens.
Vocabulary tiny_byte_level(const std::string& pre) {
  Vocabulary v;
  v.model = "gpt2";
  v.pre = pre;
  v.source = "tiny-bpe";
  // bytes_to_unicode: printable bytes are themselves, the rest 256, 257, ...
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    v.tokens.push_back(s);
  }
  v.merges = {"l l", "h e", "he ll", "hell o", "\xc4\xa0 w", "o r", "\xc4\xa0w or", "l d", "\xc4\xa0 1"};
  for (const char* t : {"ll", "he", "hell", "hello", "\xc4\xa0w", "or", "\xc4\xa0wor", "ld", "\xc4\xa0" "1"})
    v.tokens.push_back(t);
  v.types.assign(v.tokens.size(), TokenType::normal);
  v.tokens.push_back("<|im_start|>");
  v.types.push_back(TokenType::control);
  v.tokens.push_back("<|im_end|>");
  v.types.push_back(TokenType::control);
  v.tokens.push_back("<|im");  // shorter special: the longer one must win
  v.types.push_back(TokenType::control);
  v.bos = static_cast<std::int32_t>(v.tokens.size() - 3);
  v.eos = static_cast<std::int32_t>(v.tokens.size() - 2);
  return v;
}

TEST(ByteLevelTokenizer, MergeRanksDigitsAndSpecials) {
  const Tokenizer t(tiny_byte_level("smollm"));
  const std::string space = "\xc4\xa0";  // Ġ, the symbol of byte 0x20
  EXPECT_THAT(t.encode("hello world"), ElementsAre(id_of(t, "hello"), id_of(t, space + "wor"), id_of(t, "ld")));
  // smollm: digits are words of their own, so " 1" never merges.
  EXPECT_THAT(t.encode("x 12"), ElementsAre('x', id_of(t, space), '1', '2'));
  const Tokenizer gpt2(tiny_byte_level("gpt-2"));
  EXPECT_THAT(gpt2.encode("x 12"), ElementsAre('x', id_of(t, space + "1"), '2'));
  // Specials: parsed when asked, longest first, the text around them separately.
  const auto start = *t.find_token("<|im_start|>");
  const auto end = *t.find_token("<|im_end|>");
  EXPECT_THAT(t.encode("<|im_start|>hello<|im_end|>"), ElementsAre(start, id_of(t, "hello"), end));
  EXPECT_THAT(t.encode("<|im_start|>", false, false), ::testing::Each(::testing::Lt(256)));
  EXPECT_EQ(t.end_of_generation(), (std::vector<std::int32_t>{end}));
  EXPECT_TRUE(t.is_end_of_generation(end));
}

TEST(ByteLevelTokenizer, OffsetsRoundTripAndTokenSpans) {
  const Tokenizer t(tiny_byte_level("smollm"));
  const std::string text = "<|im_start|>hello world \xe6\x9d\xb1 12\n\n";
  const auto tokens = t.encode_with_offsets(text);
  std::size_t expected_begin = 0;
  std::string rebuilt;
  for (const auto& tok : tokens) {
    EXPECT_EQ(tok.begin, expected_begin);  // byte level: tokens tile the input
    EXPECT_EQ(t.token_piece(tok.id), text.substr(tok.begin, tok.end - tok.begin));
    expected_begin = tok.end;
  }
  EXPECT_EQ(expected_begin, text.size());
  EXPECT_EQ(t.decode(t.encode(text)), text);
  // "world" is bytes [18, 23): tokens "Ġwor"(17..21) and "ld"(21..23).
  // Rule: a token belongs to the span holding its first byte.
  const auto span = token_span_for_bytes(tokens, 18, 23);
  EXPECT_EQ(tokens[2].begin, 17u);
  EXPECT_EQ(span, (TokenSpan{3, 4}));  // "Ġwor" starts at the space before the span
}

TEST(ByteLevelTokenizer, InvalidInputIsAnError) {
  const Tokenizer t(tiny_byte_level("smollm"));
  EXPECT_THAT([&] { t.encode("ok\xff"); }, ::testing::ThrowsMessage<TokenizerError>(HasSubstr("byte offset 2")));
  EXPECT_THAT([&] { t.encode("\xc3"); }, ::testing::Throws<TokenizerError>());
  EXPECT_THAT([&] { t.encode("\xed\xa0\x80"); }, ::testing::Throws<TokenizerError>());  // surrogate
  EXPECT_THROW(t.token_text(-1), TokenizerError);
  EXPECT_THROW(t.decode(std::vector<std::int32_t>{100000}), TokenizerError);
  EXPECT_THAT([] { Tokenizer x(tiny_byte_level("deepseek-coder")); },
              ::testing::ThrowsMessage<TokenizerError>(HasSubstr("deepseek-coder")));
  auto bad_merge = tiny_byte_level("smollm");
  bad_merge.merges.push_back("nospace");
  EXPECT_THAT([&] { Tokenizer x(bad_merge); }, ::testing::ThrowsMessage<TokenizerError>(HasSubstr("merges[9]")));
  auto bad_model = tiny_byte_level("smollm");
  bad_model.model = "bert";
  EXPECT_THROW(Tokenizer{bad_model}, TokenizerError);
  auto bad_bos = tiny_byte_level("smollm");
  bad_bos.bos = 99999;
  EXPECT_THROW(Tokenizer{bad_bos}, TokenizerError);
  auto bad_types = tiny_byte_level("smollm");
  bad_types.types.pop_back();
  EXPECT_THROW(Tokenizer{bad_types}, TokenizerError);
}

// Random valid UTF-8 (ASCII, Latin, CJK, emoji, specials): decode inverts
// encode and offsets are ordered and inside the text, for both tokenizers.
TEST(Tokenizers, RandomTextRoundTripsWithOrderedOffsets) {
  const std::vector<std::string> pieces = {"a", "h", "e", "l", "o", " ", "  ", "\n", "\t", "1", "42", "'s", "!",
                                           "\xc3\xa9", "\xe6\x9d\xb1", "\xf0\x9f\x99\x82", "\xc2\x85",
                                           "<|im_start|>", "</s>", "hello", " world"};
  const Tokenizer byte_level(tiny_byte_level("smollm"));
  const Tokenizer spm(tiny_spm());
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()];
    for (const Tokenizer* t : {&byte_level, &spm}) {
      const auto tokens = t->encode_with_offsets(text, trial % 2 == 0);
      std::vector<std::int32_t> ids;
      std::size_t last_begin = 0;
      for (const auto& tok : tokens) {
        ids.push_back(tok.id);
        EXPECT_LE(tok.begin, tok.end);
        EXPECT_LE(tok.end, text.size());
        EXPECT_GE(tok.begin, last_begin);
        last_begin = tok.begin;
      }
      const std::size_t skip = trial % 2 == 0 ? 1 : 0;  // the BOS
      std::string decoded = t->decode(std::span(ids).subspan(skip));
      EXPECT_EQ(decoded, text) << "trial " << trial;
    }
  }
}

TEST(TokenSpans, FirstByteRule) {
  const std::vector<TokenWithOffsets> tokens = {{1, 0, 0}, {10, 0, 3}, {11, 3, 7}, {12, 7, 8}, {13, 8, 12}};
  EXPECT_EQ(token_span_for_bytes(tokens, 0, 7), (TokenSpan{1, 3}));   // BOS belongs to nothing
  EXPECT_EQ(token_span_for_bytes(tokens, 5, 9), (TokenSpan{3, 5}));   // token [3,7) starts before 5
  EXPECT_EQ(token_span_for_bytes(tokens, 4, 6), (TokenSpan{3, 3}));   // empty, placed before next token
  EXPECT_EQ(token_span_for_bytes(tokens, 8, 12), (TokenSpan{4, 5}));
  EXPECT_EQ(token_span_for_bytes(tokens, 20, 30), (TokenSpan{5, 5}));
}

TEST(TokenizerFromGguf, ReadsVocabularyKeys) {
  const Vocabulary spm = tiny_spm();
  testing::TinyGgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", spm.tokens);
  std::vector<std::int32_t> types;
  for (const auto t : spm.types) types.push_back(static_cast<std::int32_t>(t));
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_f32_array("tokenizer.ggml.scores", spm.scores);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  const auto path = std::filesystem::temp_directory_path() / ("midtune_tok_" + std::to_string(::getpid()) + ".gguf");
  testing::TinyGgufWriter::write(path, w.bytes());
  const GgufFile file(path);
  std::filesystem::remove(path);
  const Tokenizer t = Tokenizer::from_gguf(file);
  EXPECT_TRUE(t.add_bos_default());  // SentencePiece default when the key is absent
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.encode("hello world"), Tokenizer(spm).encode("hello world"));
  EXPECT_EQ(t.hash(), Tokenizer(spm).hash());
  auto changed = spm;
  changed.scores.back() = -2;
  EXPECT_NE(t.hash(), Tokenizer(changed).hash());
  EXPECT_THAT(t.hash(), ::testing::MatchesRegex("fnv1a64:[0-9a-f]{16}"));
}

}  // namespace
}  // namespace midtune
