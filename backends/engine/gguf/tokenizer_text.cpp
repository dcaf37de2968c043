// UTF-8 helpers and GPT-2's byte <-> codepoint table.
#include <array>

#include "backends/engine/gguf/tokenizer_internal.hpp"

namespace midtune::tokenizer_detail {

std::size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

std::size_t find_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  while (i < text.size()) {
    const unsigned char c = byte(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = 0;
    char32_t cp = 0;
    if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
    else return i;
    if (i + n > text.size()) return i;
    for (std::size_t k = 1; k < n; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return i;
    i += n;
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
// Printable bytes map to themselves; the other 68 go to 256, 257, ... in
// byte order (GPT-2 encoder.py, bytes_to_unicode).
std::array<char32_t, 256> build_byte_table() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}
const std::array<char32_t, 256>& byte_table() {
  static const auto table = build_byte_table();
  return table;
}
}  // namespace

char32_t gpt2_byte_to_codepoint(unsigned char byte) { return byte_table()[byte]; }

int gpt2_codepoint_to_byte(char32_t cp) {
  if (cp < 256 && byte_table()[cp] == cp) return static_cast<int>(cp);
  if (cp >= 256 && cp < 256 + 68) {
    for (int b = 0; b < 256; ++b)
      if (byte_table()[static_cast<std::size_t>(b)] == cp) return b;
  }
  return -1;
}

}  // namespace midtune::tokenizer_detail
