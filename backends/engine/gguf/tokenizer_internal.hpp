// Pieces shared by the tokenizer's translation units (not a public API).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/engine/gguf/tokenizer.hpp"

namespace midtune::tokenizer_detail {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// Encodes one run of plain text (no special tokens inside). `base` is the
// run's byte offset in the caller's input; offsets appended to `out` are
// relative to that input. `after_special` is true at the start of the input
// and right after a special token (SentencePiece adds its space prefix there).
class FragmentEncoder {
 public:
  virtual ~FragmentEncoder() = default;
  virtual void encode(std::string_view text, std::size_t base, bool after_special,
                      std::vector<TokenWithOffsets>& out) const = 0;
};

std::unique_ptr<FragmentEncoder> make_byte_level_bpe(const Vocabulary& vocab, const TokenMap& token_to_id);
std::unique_ptr<FragmentEncoder> make_sentencepiece_bpe(const Vocabulary& vocab, const TokenMap& token_to_id);

// Length of the UTF-8 sequence starting with `lead` (1 for a stray byte).
std::size_t utf8_sequence_length(unsigned char lead);
// Offset of the first byte that is not part of valid UTF-8, or npos.
std::size_t find_invalid_utf8(std::string_view text);
void append_utf8(std::string& out, char32_t cp);

// GPT-2's reversible byte <-> printable-codepoint table (bytes_to_unicode).
char32_t gpt2_byte_to_codepoint(unsigned char byte);
// -1 when the codepoint is not in the table.
int gpt2_codepoint_to_byte(char32_t cp);

}  // namespace midtune::tokenizer_detail
