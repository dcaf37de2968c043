// SentencePiece-style BPE (tokenizer.ggml.model "llama"), as llama.cpp's
// llm_tokenizer_spm: spaces become U+2581, a space prefix is added at the
// start and after special tokens, adjacent pieces merge highest score first
// while the merged text is a vocabulary token, and pieces that are not tokens
// fall back to <0xXX> byte tokens.
#include <array>
#include <cstdio>
#include <queue>

#include "backends/engine/gguf/tokenizer_internal.hpp"

namespace midtune::tokenizer_detail {
namespace {

constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581

class SentencePieceBpe final : public FragmentEncoder {
 public:
  SentencePieceBpe(const Vocabulary& vocab, const TokenMap& token_to_id)
      : token_to_id_(token_to_id), scores_(vocab.scores), add_space_prefix_(vocab.add_space_prefix),
        unk_(vocab.unk) {
    if (scores_.size() != vocab.tokens.size())
      throw TokenizerError(vocab.source + ": tokenizer.ggml.scores has " + std::to_string(scores_.size()) +
                           " entries for " + std::to_string(vocab.tokens.size()) + " tokens");
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      const char raw[2] = {static_cast<char>(b), 0};
      if (const auto it = token_to_id.find(std::string_view(hex)); it != token_to_id.end())
        byte_token_[static_cast<std::size_t>(b)] = it->second;
      else if (const auto it2 = token_to_id.find(std::string_view(raw, 1)); it2 != token_to_id.end())
        byte_token_[static_cast<std::size_t>(b)] = it2->second;
      else
        byte_token_[static_cast<std::size_t>(b)] = -1;
    }
  }

  void encode(std::string_view input, std::size_t base, bool after_special,
              std::vector<TokenWithOffsets>& out) const override {
    // The escaped text and, per byte of it, the input byte it stands for
    // (the added prefix stands for none: npos).
    std::string text;
    std::vector<std::size_t> source;
    const auto push = [&](std::string_view bytes, std::size_t from) {
      text += bytes;
      source.insert(source.end(), bytes.size(), from);
    };
    if (add_space_prefix_ && after_special) push(kSpaceMark, std::string::npos);
    for (std::size_t i = 0; i < input.size(); ++i) {
      if (input[i] == ' ') push(kSpaceMark, base + i);
      else push(input.substr(i, 1), base + i);
    }
    if (text.empty()) return;

    // One symbol per UTF-8 character, linked so merges can unlink the right one.
    struct Symbol {
      std::size_t begin, size;
      int prev, next;
    };
    std::vector<Symbol> symbols;
    for (std::size_t offs = 0; offs < text.size();) {
      const std::size_t n = std::min(utf8_sequence_length(static_cast<unsigned char>(text[offs])), text.size() - offs);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({offs, n, index - 1, offs + n == text.size() ? -1 : index + 1});
      offs += n;
    }

    struct Bigram {
      int left, right;
      float score;
      std::size_t size;
      // Highest score first; on a tie the leftmost pair (llm_bigram_spm).
      bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
    };
    std::priority_queue<Bigram> queue;
    const auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const std::string_view merged(text.data() + symbols[static_cast<std::size_t>(left)].begin,
                                    symbols[static_cast<std::size_t>(left)].size + symbols[static_cast<std::size_t>(right)].size);
      const auto it = token_to_id_.find(merged);
      if (it == token_to_id_.end()) return;
      queue.push({left, right, scores_[static_cast<std::size_t>(it->second)], merged.size()});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram top = queue.top();
      queue.pop();
      auto& left = symbols[static_cast<std::size_t>(top.left)];
      auto& right = symbols[static_cast<std::size_t>(top.right)];
      if (left.size == 0 || right.size == 0 || left.size + right.size != top.size) continue;  // stale
      left.size += right.size;
      right.size = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.left;
      try_add(left.prev, top.left);
      try_add(top.left, left.next);
    }

    const auto range = [&](std::size_t from, std::size_t size) {
      std::size_t lo = std::string::npos, hi = 0;
      for (std::size_t k = from; k < from + size; ++k) {
        if (source[k] == std::string::npos) continue;
        lo = std::min(lo, source[k]);
        hi = std::max(hi, source[k] + 1);
      }
      return lo == std::string::npos ? std::pair{base, base} : std::pair{lo, hi};
    };
    for (int i = 0; i != -1; i = symbols[static_cast<std::size_t>(i)].next) {
      const auto& s = symbols[static_cast<std::size_t>(i)];
      const std::string_view piece(text.data() + s.begin, s.size);
      if (const auto it = token_to_id_.find(piece); it != token_to_id_.end()) {
        const auto [lo, hi] = range(s.begin, s.size);
        out.push_back({it->second, lo, hi});
        continue;
      }
      for (std::size_t k = s.begin; k < s.begin + s.size; ++k) {
        const auto [lo, hi] = range(k, 1);
        out.push_back({byte_token(static_cast<unsigned char>(text[k])), lo, hi});
      }
    }
  }

 private:
  std::int32_t byte_token(unsigned char b) const {
    if (byte_token_[b] >= 0) return byte_token_[b];
    if (unk_) return *unk_;
    throw TokenizerError("SentencePiece vocabulary has no byte token <0x" + std::to_string(b) +
                         "> and no unknown token");
  }

  const TokenMap& token_to_id_;
  std::vector<float> scores_;
  bool add_space_prefix_;
  std::optional<std::int32_t> unk_;
  std::array<std::int32_t, 256> byte_token_{};
};

}  // namespace

std::unique_ptr<FragmentEncoder> make_sentencepiece_bpe(const Vocabulary& vocab, const TokenMap& token_to_id) {
  return std::make_unique<SentencePieceBpe>(vocab, token_to_id);
}

}  // namespace midtune::tokenizer_detail
