// Tokenizer built from a GGUF vocabulary, matching
// llama.cpp token for token:
//   - tokenizer.ggml.model "gpt2": GPT-2 byte-level BPE with merge ranks; the
//     pre-tokenizer comes from tokenizer.ggml.pre ("smollm" and its llama.cpp
//     siblings: every \p{N} codepoint on its own, then the GPT-2 regex; "gpt2":
//     the GPT-2 regex alone; "llama-bpe" (Llama-3): its regex, digits in
//     threes, a word that is a token taken whole; "qwen2": the same regex
//     with single digits);
//   - tokenizer.ggml.model "llama": SentencePiece-style BPE (merges by token
//     score, spaces as U+2581, optional space prefix, <0xXX> byte fallback).
// Special tokens (control, user-defined, unknown) written in the text are
// parsed as single tokens, longest first, as llama.cpp does. Also like
// llama.cpp, a byte-level vocabulary that lacks a byte's symbol (SmolLM2 has
// none for 0x04 or 0xF1, the lead byte of U+40000..U+7FFFF) drops that byte:
// such text does not round-trip and its tokens do not cover every byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace midtune {

class GgufFile;

struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : std::int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

enum class TokenizerKind { byte_level_bpe, sentencepiece_bpe };

// One token and the half-open byte range [begin, end) of the input text it
// came from. Byte-level BPE tokens cover exactly their bytes. A SentencePiece
// token covers the input bytes of its pieces (a U+2581 stands for the input
// space it replaced; the added space prefix stands for no input byte). BOS has
// the empty range [0, 0).
struct TokenWithOffsets {
  std::int32_t id = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const TokenWithOffsets&) const = default;
};

// A half-open range [begin, end) of token indices.
struct TokenSpan {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const TokenSpan&) const = default;
};

// The tokens of a byte span of the input. Rule for a token straddling a
// boundary: a token belongs to the span that holds its first byte
// (begin_byte <= token.begin < end_byte); tokens with an empty range (BOS)
// belong to no span. Tokens are in input order, so the result is contiguous;
// an empty span (begin == end) when no token starts inside.
TokenSpan token_span_for_bytes(std::span<const TokenWithOffsets> tokens, std::size_t begin_byte,
                               std::size_t end_byte);

// Everything the tokenizer is built from (tests build small ones by hand).
struct Vocabulary {
  std::string model;                 // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;                   // tokenizer.ggml.pre ("smollm", "gpt2", ...; SentencePiece ignores it)
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<TokenType> types;      // tokenizer.ggml.token_type (empty: all normal)
  std::vector<float> scores;         // tokenizer.ggml.scores (SentencePiece merge priorities)
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", rank = index (BPE)
  std::optional<std::int32_t> bos, eos, unk, eot, pad;
  bool add_bos = false;              // tokenizer.ggml.add_bos_token
  bool add_space_prefix = true;      // tokenizer.ggml.add_space_prefix (SentencePiece)
  std::string source = "<vocabulary>";  // named in error messages (the GGUF path)
};

// Reads the vocabulary keys; throws GgufError/TokenizerError naming the key.
Vocabulary read_vocabulary(const GgufFile& file);

class Tokenizer {
 public:
  // Throws TokenizerError for an unsupported model/pre-tokenizer, a malformed
  // merge, an out-of-range special id or inconsistent array lengths.
  explicit Tokenizer(Vocabulary vocabulary);
  static Tokenizer from_gguf(const GgufFile& file);

  // Text -> ids. add_bos prepends BOS (the model's wish is add_bos_default()).
  // parse_special: control tokens written in the text (e.g. <|im_start|>)
  // become single tokens; user-defined tokens are always parsed.
  // Throws TokenizerError on invalid UTF-8 (naming the byte offset).
  std::vector<std::int32_t> encode(std::string_view text, bool add_bos = false, bool parse_special = true) const;
  std::vector<TokenWithOffsets> encode_with_offsets(std::string_view text, bool add_bos = false,
                                                    bool parse_special = true) const;

  // Ids -> UTF-8 bytes (byte-level unmapping / U+2581 -> space, byte tokens).
  // render_special: write control tokens' text (so decode(encode(x)) == x for
  // text with special tokens); otherwise they produce nothing. A SentencePiece
  // space prefix added by encode is removed from the start.
  std::string decode(std::span<const std::int32_t> ids, bool render_special = true) const;
  // The text `ids` add after `previous` (the token before them, e.g. a
  // prompt's last): a generated continuation, so its first piece keeps its
  // space, as in decode of the whole sequence (and as llama.cpp prints it).
  std::string decode_continuation(std::int32_t previous, std::span<const std::int32_t> ids,
                                  bool render_special = true) const;
  // The bytes of one token (no prefix removal), for streaming output.
  std::string token_piece(std::int32_t id, bool render_special = true) const;

  TokenizerKind kind() const;
  std::size_t vocab_size() const;
  const std::string& token_text(std::int32_t id) const;  // throws on a bad id
  TokenType token_type(std::int32_t id) const;
  std::optional<std::int32_t> find_token(std::string_view text) const;
  std::optional<std::int32_t> bos() const;
  std::optional<std::int32_t> eos() const;
  bool add_bos_default() const;
  // Tokens that end generation: EOS, EOT and the end-of-turn tokens llama.cpp
  // recognises by text (<|im_end|>, <|eot_id|>, <|endoftext|>, ...), sorted.
  const std::vector<std::int32_t>& end_of_generation() const;
  bool is_end_of_generation(std::int32_t id) const;
  // Model identity: "fnv1a64:<16 hex>" over model, pre, tokens, types, scores, merges.
  const std::string& hash() const;

  struct Impl;

 private:
  // Control, user-defined, unknown and unused tokens: encode adds the
  // SentencePiece space prefix again after one.
  static bool is_special_type(TokenType type);
  std::string decode_from(std::span<const std::int32_t> ids, bool render_special, bool after_special) const;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace midtune
