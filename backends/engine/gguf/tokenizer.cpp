#include "backends/engine/gguf/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <list>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/gguf/tokenizer_internal.hpp"

namespace midtune {

using tokenizer_detail::FragmentEncoder;
using tokenizer_detail::TokenMap;

struct Tokenizer::Impl {
  Vocabulary vocab;
  TokenizerKind kind = TokenizerKind::byte_level_bpe;
  TokenMap token_to_id;
  std::vector<std::int32_t> special_by_length;  // control / user-defined / unknown, longest text first
  std::vector<std::int32_t> end_of_generation;
  std::string hash;
  std::unique_ptr<FragmentEncoder> encoder;  // refers to token_to_id: Impl never moves

  void check_id(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab.tokens.size())
      throw TokenizerError(vocab.source + ": token id " + std::to_string(id) + " is outside the vocabulary of " +
                           std::to_string(vocab.tokens.size()));
  }
  TokenType type(std::int32_t id) const { return vocab.types[static_cast<std::size_t>(id)]; }
};

namespace {

// `none_allowed`: some converters write -1 / UINT32_MAX for "none"; that is
// accepted for optional tokens, but BOS and EOS are needed to frame prompts and
// stop generation, so a present key must name a real token.
std::optional<std::int32_t> optional_id(const GgufFile& file, const char* key, bool none_allowed = true) {
  if (!file.has(key)) return std::nullopt;
  const std::int64_t v = file.get_int(key);
  if (none_allowed && (v < 0 || v == 0xFFFFFFFFll)) return std::nullopt;
  if (v < 0 || v > INT32_MAX)
    throw GgufError(file.path().string() + ": metadata key '" + key + "' = " + std::to_string(v) +
                    " is not a token id (remove the key if the model has no such token)");
  return static_cast<std::int32_t>(v);
}

// FNV-1a, 64 bit.
struct Fnv1a {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  void add(std::string_view s) {
    const std::uint64_t n = s.size();
    add(&n, sizeof n);  // length prefix keeps "ab","c" apart from "a","bc"
    add(s.data(), s.size());
  }
};

std::string vocabulary_hash(const Vocabulary& v) {
  Fnv1a f;
  f.add(v.model);
  f.add(v.pre);
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    f.add(v.tokens[i]);
    const auto t = static_cast<std::int32_t>(v.types[i]);
    f.add(&t, sizeof t);
  }
  for (const float s : v.scores) f.add(&s, sizeof s);
  for (const auto& m : v.merges) f.add(m);
  char out[32];
  std::snprintf(out, sizeof out, "fnv1a64:%016llx", static_cast<unsigned long long>(f.h));
  return out;
}

// End-of-turn tokens llama.cpp recognises by their text (llama-vocab.cpp).
constexpr std::string_view kEndOfTurnTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                                "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|end_of_text|>"};

struct Fragment {
  std::size_t begin, end;
  std::int32_t token;  // -1: plain text
};

}  // namespace

Vocabulary read_vocabulary(const GgufFile& file) {
  Vocabulary v;
  v.source = file.path().string();
  v.model = file.get_string("tokenizer.ggml.model");
  v.pre = file.get_string_or("tokenizer.ggml.pre", "default");
  v.tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (file.has("tokenizer.ggml.token_type")) {
    for (const auto t : file.get_int_array("tokenizer.ggml.token_type")) {
      if (t < 0 || t > 6) throw GgufError(v.source + ": tokenizer.ggml.token_type has invalid value " + std::to_string(t));
      v.types.push_back(static_cast<TokenType>(t));
    }
  }
  if (file.has("tokenizer.ggml.scores")) v.scores = file.get_float_array("tokenizer.ggml.scores");
  if (file.has("tokenizer.ggml.merges")) v.merges = file.get_string_array("tokenizer.ggml.merges");
  v.bos = optional_id(file, "tokenizer.ggml.bos_token_id", false);
  v.eos = optional_id(file, "tokenizer.ggml.eos_token_id", false);
  v.unk = optional_id(file, "tokenizer.ggml.unknown_token_id");
  v.eot = optional_id(file, "tokenizer.ggml.eot_token_id");
  v.pad = optional_id(file, "tokenizer.ggml.padding_token_id");
  // llama.cpp's defaults: SentencePiece adds BOS and a space prefix, GPT-2 BPE
  // neither, except the Llama-3 pre-tokenizer, which adds BOS.
  const bool spm = v.model == "llama";
  const bool llama3_pre = v.pre == "llama3" || v.pre == "llama-v3" || v.pre == "llama-bpe";
  v.add_bos = file.has("tokenizer.ggml.add_bos_token") ? file.get_bool("tokenizer.ggml.add_bos_token")
                                                       : spm || llama3_pre;
  v.add_space_prefix =
      file.has("tokenizer.ggml.add_space_prefix") ? file.get_bool("tokenizer.ggml.add_space_prefix") : spm;
  return v;
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) { return Tokenizer(read_vocabulary(file)); }

Tokenizer::Tokenizer(Vocabulary vocabulary) {
  auto impl = std::make_shared<Impl>();
  Vocabulary& v = impl->vocab;
  v = std::move(vocabulary);
  const auto fail = [&](const std::string& what) { throw TokenizerError(v.source + ": " + what); };
  if (v.tokens.empty()) fail("tokenizer.ggml.tokens is empty");
  if (v.tokens.size() > static_cast<std::size_t>(INT32_MAX)) fail("tokenizer.ggml.tokens is too long");
  if (v.types.empty()) v.types.assign(v.tokens.size(), TokenType::normal);
  if (v.types.size() != v.tokens.size())
    fail("tokenizer.ggml.token_type has " + std::to_string(v.types.size()) + " entries for " +
         std::to_string(v.tokens.size()) + " tokens");
  const std::pair<const std::optional<std::int32_t>*, const char*> specials[] = {
      {&v.bos, "bos"}, {&v.eos, "eos"}, {&v.unk, "unknown"}, {&v.eot, "eot"}, {&v.pad, "padding"}};
  for (const auto& [id, name] : specials) {
    if (*id && (**id < 0 || static_cast<std::size_t>(**id) >= v.tokens.size()))
      fail(std::string("tokenizer.ggml.") + name + "_token_id " + std::to_string(**id) +
           " is outside the vocabulary of " + std::to_string(v.tokens.size()) + " tokens");
  }
  // Token texts are UTF-8 in both supported vocabularies (GPT-2 maps bytes to
  // code points; SentencePiece writes raw bytes as "<0xAB>"); anything else is
  // a corrupt file, and would be decoded into invalid text.
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    if (const auto bad = tokenizer_detail::find_invalid_utf8(v.tokens[i]); bad != std::string_view::npos)
      fail("tokenizer.ggml.tokens[" + std::to_string(i) + "] is not valid UTF-8 at byte " + std::to_string(bad));
  }
  // Later duplicates win, as in llama.cpp's token_to_id.
  impl->token_to_id.reserve(v.tokens.size());
  for (std::size_t i = 0; i < v.tokens.size(); ++i) impl->token_to_id[v.tokens[i]] = static_cast<std::int32_t>(i);

  if (v.model == "gpt2") {
    impl->kind = TokenizerKind::byte_level_bpe;
    impl->encoder = tokenizer_detail::make_byte_level_bpe(v, impl->token_to_id);
  } else if (v.model == "llama") {
    impl->kind = TokenizerKind::sentencepiece_bpe;
    impl->encoder = tokenizer_detail::make_sentencepiece_bpe(v, impl->token_to_id);
  } else {
    fail("tokenizer.ggml.model '" + v.model + "' is not supported (gpt2, llama)");
  }

  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    const TokenType t = v.types[i];
    if ((t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown) && !v.tokens[i].empty())
      impl->special_by_length.push_back(static_cast<std::int32_t>(i));
  }
  std::stable_sort(impl->special_by_length.begin(), impl->special_by_length.end(), [&](auto a, auto b) {
    return v.tokens[static_cast<std::size_t>(a)].size() > v.tokens[static_cast<std::size_t>(b)].size();
  });

  auto& eog = impl->end_of_generation;
  if (v.eos) eog.push_back(*v.eos);
  if (v.eot) eog.push_back(*v.eot);
  for (const auto text : kEndOfTurnTexts)
    if (const auto it = impl->token_to_id.find(text); it != impl->token_to_id.end()) eog.push_back(it->second);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

  impl->hash = vocabulary_hash(v);
  impl_ = std::move(impl);
}

std::vector<TokenWithOffsets> Tokenizer::encode_with_offsets(std::string_view text, bool add_bos,
                                                             bool parse_special) const {
  const Impl& m = *impl_;
  if (const auto bad = tokenizer_detail::find_invalid_utf8(text); bad != std::string_view::npos)
    throw TokenizerError("text to tokenize is not valid UTF-8 at byte offset " + std::to_string(bad));
  // Cut special tokens out of the plain text, longest token first, each one
  // at every place it occurs (llama.cpp's tokenizer_st_partition).
  std::list<Fragment> fragments;
  if (!text.empty()) fragments.push_back({0, text.size(), -1});  // empty text: no fragment, no space prefix
  for (const std::int32_t id : m.special_by_length) {
    const TokenType type = m.type(id);
    if (!parse_special && type != TokenType::user_defined) continue;
    const std::string& special = m.vocab.tokens[static_cast<std::size_t>(id)];
    for (auto it = fragments.begin(); it != fragments.end(); ++it) {
      if (it->token >= 0) continue;
      const std::string_view raw = text.substr(it->begin, it->end - it->begin);
      const std::size_t hit = raw.find(special);
      if (hit == std::string_view::npos) continue;
      const std::size_t at = it->begin + hit;
      const std::size_t end = it->end;
      // [begin, at) stays plain, then the special token, then the rest is
      // revisited by the loop as a new plain fragment.
      it->end = at;
      auto token_it = fragments.insert(std::next(it), {at, at + special.size(), id});
      if (at + special.size() < end) fragments.insert(std::next(token_it), {at + special.size(), end, -1});
      if (it->begin == it->end) it = fragments.erase(it);
      it = token_it;
    }
  }
  std::vector<TokenWithOffsets> out;
  if (add_bos) {
    if (!m.vocab.bos) throw TokenizerError(m.vocab.source + ": BOS requested but the vocabulary has no BOS token");
    out.push_back({*m.vocab.bos, 0, 0});
  }
  bool after_special = true;
  for (const auto& f : fragments) {
    if (f.token >= 0) {
      out.push_back({f.token, f.begin, f.end});
      after_special = true;
    } else {
      m.encoder->encode(text.substr(f.begin, f.end - f.begin), f.begin, after_special, out);
      after_special = false;
    }
  }
  return out;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  const auto with_offsets = encode_with_offsets(text, add_bos, parse_special);
  std::vector<std::int32_t> ids;
  ids.reserve(with_offsets.size());
  for (const auto& t : with_offsets) ids.push_back(t.id);
  return ids;
}

std::string Tokenizer::token_piece(std::int32_t id, bool render_special) const {
  const Impl& m = *impl_;
  m.check_id(id);
  const std::string& text = m.vocab.tokens[static_cast<std::size_t>(id)];
  switch (m.type(id)) {
    case TokenType::control:
    case TokenType::unknown:
    case TokenType::unused:
      return render_special ? text : std::string();
    case TokenType::user_defined:
      return text;
    case TokenType::byte: {
      unsigned value = 0;
      if (text.size() == 6 && std::sscanf(text.c_str(), "<0x%2X>", &value) == 1) return std::string(1, static_cast<char>(value));
      return text;
    }
    case TokenType::normal:
    case TokenType::undefined:
      break;
  }
  std::string out;
  if (m.kind == TokenizerKind::sentencepiece_bpe) {
    // U+2581 -> space
    for (std::size_t i = 0; i < text.size();) {
      if (text.compare(i, 3, "\xe2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += text[i++];
      }
    }
    return out;
  }
  // Byte level: every codepoint of the token text stands for one byte.
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = std::min(tokenizer_detail::utf8_sequence_length(static_cast<unsigned char>(text[i])), text.size() - i);
    char32_t cp = n == 1 ? static_cast<unsigned char>(text[i]) : static_cast<unsigned char>(text[i]) & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    const int byte = tokenizer_detail::gpt2_codepoint_to_byte(cp);
    if (byte >= 0) out += static_cast<char>(byte);
    else out.append(text, i, n);  // not a byte symbol: keep as is
    i += n;
  }
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool render_special) const {
  return decode_from(ids, render_special, /*after_special=*/true);
}

std::string Tokenizer::decode_continuation(std::int32_t previous, std::span<const std::int32_t> ids,
                                           bool render_special) const {
  return decode_from(ids, render_special, is_special_type(token_type(previous)));
}

bool Tokenizer::is_special_type(TokenType type) {
  return type == TokenType::control || type == TokenType::user_defined || type == TokenType::unknown ||
         type == TokenType::unused;
}

std::string Tokenizer::decode_from(std::span<const std::int32_t> ids, bool render_special, bool after_special) const {
  const Impl& m = *impl_;
  std::string out;
  // Undo the SentencePiece space prefix where encode adds it: at the start
  // and after each special token.
  const bool strip_prefix = m.kind == TokenizerKind::sentencepiece_bpe && m.vocab.add_space_prefix;
  for (const std::int32_t id : ids) {
    std::string piece = token_piece(id, render_special);
    const bool special = is_special_type(m.type(id));
    if (strip_prefix && after_special && !special && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    after_special = special;
    out += piece;
  }
  return out;
}

TokenSpan token_span_for_bytes(std::span<const TokenWithOffsets> tokens, std::size_t begin_byte,
                               std::size_t end_byte) {
  TokenSpan span{tokens.size(), tokens.size()};
  bool found = false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    if (t.begin == t.end) continue;
    if (t.begin >= begin_byte && t.begin < end_byte) {
      if (!found) span.begin = i;
      span.end = i + 1;
      found = true;
    } else if (found && t.begin >= end_byte) {
      break;
    }
  }
  if (!found) {
    // Empty: place it where the first token at or after begin_byte would be.
    std::size_t i = 0;
    while (i < tokens.size() && (tokens[i].begin == tokens[i].end || tokens[i].begin < begin_byte)) ++i;
    span = {i, i};
  }
  return span;
}

TokenizerKind Tokenizer::kind() const { return impl_->kind; }
std::size_t Tokenizer::vocab_size() const { return impl_->vocab.tokens.size(); }
const std::string& Tokenizer::token_text(std::int32_t id) const {
  impl_->check_id(id);
  return impl_->vocab.tokens[static_cast<std::size_t>(id)];
}
TokenType Tokenizer::token_type(std::int32_t id) const {
  impl_->check_id(id);
  return impl_->type(id);
}
std::optional<std::int32_t> Tokenizer::find_token(std::string_view text) const {
  const auto it = impl_->token_to_id.find(text);
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}
std::optional<std::int32_t> Tokenizer::bos() const { return impl_->vocab.bos; }
std::optional<std::int32_t> Tokenizer::eos() const { return impl_->vocab.eos; }
bool Tokenizer::add_bos_default() const { return impl_->vocab.add_bos; }
const std::vector<std::int32_t>& Tokenizer::end_of_generation() const { return impl_->end_of_generation; }
bool Tokenizer::is_end_of_generation(std::int32_t id) const {
  return std::binary_search(impl_->end_of_generation.begin(), impl_->end_of_generation.end(), id);
}
const std::string& Tokenizer::hash() const { return impl_->hash; }

}  // namespace midtune
