// A chunk of the prompt (a document, a KV pair) as a half-open token range
// [begin, end). CALIOPE and SIW work on these; the backend derives them from
// the BatchItem's byte spans with the tokenizer's offsets.
#pragma once

#include <span>
#include <string>

namespace midtune::engine::hooks {

struct TokenSpan {
  int begin = 0;
  int end = 0;
  bool operator==(const TokenSpan&) const = default;
};

// Throws std::invalid_argument ("<what>: chunk 3 [40, 38) ...") unless the
// spans are non-empty, inside [0, tokens) and in increasing, non-overlapping order.
void check_token_spans(std::span<const TokenSpan> chunks, int tokens, const std::string& what);

}  // namespace midtune::engine::hooks
