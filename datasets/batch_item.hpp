// A prompt as a dataset hands it to a backend: the text, already wrapped in
// the model's chat template, its chunks and the gold answer. The datasets
// build these (prompts.hpp, slice.hpp) and every backend reads them
// (backends/backend.hpp), so the type sits here, below both, and the
// datasets depend on no backend.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace midtune {

// A chunk of the prompt (a KV pair, a document) as a half-open byte range
// [begin, end) of BatchItem::prompt_text. Backends with a tokenizer turn these
// into token spans (CALIOPE, SIW need them).
struct ByteSpan {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const ByteSpan&) const = default;
};

struct BatchItem {
  std::string id;
  // The full prompt, already wrapped in the model's chat template.
  std::string prompt_text;
  std::vector<ByteSpan> chunks;
  // The gold answer as the model should emit it (teacher_forced mode).
  std::string gold;
  // Where the gold chunk sits, 0 = first chunk, 1 = last. Metadata: only test
  // doubles and logs read it; real backends must not.
  double gold_depth = 0.0;
};

}  // namespace midtune
