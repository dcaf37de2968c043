// GPT-2 byte-level BPE with llama.cpp's pre-tokenizers (tokenizer.ggml.model
// "gpt2"): split the text into words by regex, map each byte of a word to
// GPT-2's printable codepoint, then apply merges lowest rank first.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <climits>
#include <queue>
#include <set>

#include "backends/engine/gguf/tokenizer_internal.hpp"

namespace midtune::tokenizer_detail {
namespace {

// llama.cpp's whitespace set (Unicode White_Space), used for \s so that
// U+0085 counts as space exactly as in llama.cpp's own GPT-2 splitter.
constexpr const char* kSpace = "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// llama.cpp's regexes with \s and \S spelled out as kSpace, so that \s
// means the same in every pattern as in llama.cpp's own splitter.
std::string with_space_class(const std::string& pattern) {
  const std::string space = kSpace;
  std::string out;
  bool in_brackets = false;  // these patterns never nest brackets or escape '[' / ']'
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size() && (pattern[i + 1] == 's' || pattern[i + 1] == 'S')) {
      // Inside brackets (only ever [^\s...] here) \s adds the set's members.
      if (in_brackets) out += space;
      else out += pattern[i + 1] == 's' ? "[" + space + "]" : "[^" + space + "]";
      ++i;
      continue;
    }
    if (c == '\\' && i + 1 < pattern.size()) {  // any other escape passes through whole
      out += c;
      out += pattern[++i];
      continue;
    }
    if (c == '[') in_brackets = true;
    if (c == ']') in_brackets = false;
    out += c;
  }
  return out;
}

// GPT-2's word regex.
const char* const kGpt2Words = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// Llama-3 (tokenizer.json's case-insensitive contractions spelled out, as llama.cpp does).
const char* const kLlama3Words =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2: Llama-3's with single digits.
const char* const kQwen2Words =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A pre-tokenizer as llama.cpp defines it (llama-vocab.cpp): regexes applied
// in turn, each splitting the pieces the previous one left; with
// ignore_merges a word that is a token of its own is taken whole.
struct PreTokenizer {
  std::vector<std::string> patterns;
  bool ignore_merges = false;
};

PreTokenizer pre_tokenizer_for(const Vocabulary& vocab) {
  static const std::set<std::string, std::less<>> digit_split = {"smollm", "starcoder", "refact", "command-r",
                                                                 "codeshell", "exaone"};
  // llama.cpp splits MPT's (GPT-NeoX) text with GPT-2's expression.
  static const std::set<std::string, std::less<>> gpt2 = {"gpt-2", "gpt2", "mpt"};
  static const std::set<std::string, std::less<>> llama3 = {"llama3", "llama-v3", "llama-bpe", "falcon3"};
  static const std::set<std::string, std::less<>> qwen2 = {"qwen2", "deepseek-r1-qwen"};
  if (digit_split.count(vocab.pre)) return {{"\\p{N}", kGpt2Words}, false};
  if (gpt2.count(vocab.pre)) return {{kGpt2Words}, false};
  if (llama3.count(vocab.pre)) return {{kLlama3Words}, true};
  if (qwen2.count(vocab.pre)) return {{kQwen2Words}, false};
  throw TokenizerError(vocab.source + ": tokenizer.ggml.pre '" + vocab.pre +
                       "' is not supported (supported: llama-bpe, llama3, llama-v3, falcon3, qwen2, "
                       "deepseek-r1-qwen, smollm, starcoder, refact, command-r, codeshell, exaone, gpt-2, mpt)");
}

// A compiled PCRE2 pattern in UTF + UCP mode (Unicode properties for \p{..}).
class Regex {
 public:
  explicit Regex(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE error_at = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                          &error, &error_at, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw TokenizerError("cannot compile pre-tokenizer regex at " + std::to_string(error_at) + ": " +
                           reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits `text` (valid UTF-8) into matches and the gaps between them, in
  // order, as llama.cpp's unicode_regex_split keeps both.
  template <typename Emit>
  void split(std::string_view text, Emit&& emit) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    if (!match) throw TokenizerError("out of memory for regex match data");
    std::size_t pos = 0;
    std::size_t gap_start = 0;
    while (pos < text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                                 PCRE2_NO_UTF_CHECK, match.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw TokenizerError("pre-tokenizer regex failed with PCRE2 error " + std::to_string(rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
      const std::size_t begin = ovector[0], end = ovector[1];
      if (end == begin) {  // no pattern here matches empty; step over one codepoint to be safe
        pos = begin + utf8_sequence_length(static_cast<unsigned char>(text[begin]));
        continue;
      }
      if (begin > gap_start) emit(gap_start, begin);
      emit(begin, end);
      pos = gap_start = end;
    }
    if (gap_start < text.size()) emit(gap_start, text.size());
  }

 private:
  pcre2_code* code_ = nullptr;
};

class ByteLevelBpe final : public FragmentEncoder {
 public:
  ByteLevelBpe(const Vocabulary& vocab, const TokenMap& token_to_id)
      : token_to_id_(token_to_id) {
    const PreTokenizer pre = pre_tokenizer_for(vocab);
    for (const std::string& pattern : pre.patterns) regexes_.push_back(std::make_unique<Regex>(with_space_class(pattern)));
    ignore_merges_ = pre.ignore_merges;
    for (int b = 0; b < 256; ++b) {
      std::string s;
      append_utf8(s, gpt2_byte_to_codepoint(static_cast<unsigned char>(b)));
      byte_symbol_[static_cast<std::size_t>(b)] = s;
    }
    merge_rank_.reserve(vocab.merges.size());
    for (std::size_t i = 0; i < vocab.merges.size(); ++i) {
      const std::string& merge = vocab.merges[i];
      // llama.cpp splits at the first space after the first byte.
      const auto space = merge.find(' ', 1);
      if (space == std::string::npos || space + 1 >= merge.size())
        throw TokenizerError(vocab.source + ": tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + merge +
                             "' is not 'left right'");
      merge_rank_.emplace(merge, static_cast<int>(i));  // first occurrence keeps the lowest rank
    }
  }

  void encode(std::string_view text, std::size_t base, bool /*after_special*/,
              std::vector<TokenWithOffsets>& out) const override {
    split_with(0, text, base, out);
  }

 private:
  // A run of the encoded word: encoded bytes [at, at + size) and input bytes
  // [begin, end); linked so a merge unlinks the right symbol in O(1).
  struct Symbol {
    std::size_t at, size;
    std::size_t begin, end;
    int prev, next;
  };
  struct Pair {
    int left, right;
    int rank;
    std::size_t size;  // encoded bytes of the merged text, to spot stale pairs
    // Lowest rank first; on a tie the leftmost pair (llama.cpp's llm_bigram_bpe).
    bool operator<(const Pair& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
  };

  // Regex `level` splits `piece` (input bytes from `base`); the last level's
  // pieces are the words. A later regex never sees across an earlier one's
  // boundary (e.g. a look-ahead stops at a digit split off before it).
  void split_with(std::size_t level, std::string_view piece, std::size_t base,
                  std::vector<TokenWithOffsets>& out) const {
    if (level == regexes_.size()) {
      encode_word(piece, base, out);
      return;
    }
    regexes_[level]->split(piece, [&](std::size_t b, std::size_t e) {
      split_with(level + 1, piece.substr(b, e - b), base + b, out);
    });
  }

  void encode_word(std::string_view word, std::size_t base, std::vector<TokenWithOffsets>& out) const {
    if (ignore_merges_) {  // Llama-3: a word that is a token is taken whole, merges or not
      std::string whole;
      for (const char c : word) whole += byte_symbol_[static_cast<unsigned char>(c)];
      if (const auto it = token_to_id_.find(whole); it != token_to_id_.end()) {
        out.push_back({it->second, base, base + word.size()});
        return;
      }
    }
    std::string encoded;
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    for (std::size_t i = 0; i < word.size(); ++i) {
      const std::string& sym = byte_symbol_[static_cast<unsigned char>(word[i])];
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({encoded.size(), sym.size(), base + i, base + i + 1, index - 1,
                         i + 1 == word.size() ? -1 : index + 1});
      encoded += sym;
    }
    std::string key;
    std::priority_queue<Pair> queue;
    const auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const Symbol& l = symbols[static_cast<std::size_t>(left)];
      const Symbol& r = symbols[static_cast<std::size_t>(right)];
      key.assign(encoded, l.at, l.size).append(1, ' ').append(encoded, r.at, r.size);
      const auto it = merge_rank_.find(key);
      if (it != merge_rank_.end()) queue.push({left, right, it->second, l.size + r.size});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Pair top = queue.top();
      queue.pop();
      Symbol& l = symbols[static_cast<std::size_t>(top.left)];
      Symbol& r = symbols[static_cast<std::size_t>(top.right)];
      // Stale: one side already merged elsewhere since this pair was queued.
      if (l.size == 0 || r.size == 0 || l.next != top.right || l.size + r.size != top.size) continue;
      l.size += r.size;
      l.end = r.end;
      r.size = 0;
      l.next = r.next;
      if (r.next >= 0) symbols[static_cast<std::size_t>(r.next)].prev = top.left;
      try_add(l.prev, top.left);
      try_add(top.left, l.next);
    }
    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[static_cast<std::size_t>(i)].next) {
      const Symbol& s = symbols[static_cast<std::size_t>(i)];
      const std::string_view text(encoded.data() + s.at, s.size);
      if (const auto it = token_to_id_.find(text); it != token_to_id_.end()) {
        out.push_back({it->second, s.begin, s.end});
        continue;
      }
      // A symbol missing from the vocabulary (SmolLM2 lacks e.g. the symbols
      // of bytes 0x04 and 0xF1): like llama.cpp, look up each byte of its
      // encoded text as a one-byte token and drop the bytes that have none.
      for (std::size_t b = s.begin; b < s.end; ++b) {
        for (const char c : byte_symbol_[static_cast<unsigned char>(word[b - base])]) {
          if (const auto it = token_to_id_.find(std::string_view(&c, 1)); it != token_to_id_.end())
            out.push_back({it->second, b, b + 1});
        }
      }
    }
  }

  const TokenMap& token_to_id_;
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> merge_rank_;
  std::array<std::string, 256> byte_symbol_;
  std::vector<std::unique_ptr<Regex>> regexes_;
  bool ignore_merges_ = false;
};

}  // namespace

std::unique_ptr<FragmentEncoder> make_byte_level_bpe(const Vocabulary& vocab, const TokenMap& token_to_id) {
  return std::make_unique<ByteLevelBpe>(vocab, token_to_id);
}

}  // namespace midtune::tokenizer_detail
