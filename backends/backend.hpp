// The Backend interface (DESIGN.md "Data flow"): runs a model under an
// Intervention on a batch of prompts and returns, per sample, what the
// metric needs. Backends never see a genome.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/intervention.hpp"

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

enum class Mode { generate, teacher_forced };

struct RunOptions {
  Mode mode = Mode::generate;
  int max_new_tokens = 100;
};

struct SampleOutput {
  std::string id;
  std::string output_text;          // generate mode: greedy continuation
  bool gold_emitted_first = false;  // teacher_forced: argmax == gold at every answer token
  double gold_logprob = 0.0;        // teacher_forced: sum of log p(gold token)
  int prompt_tokens = 0;
  double wall_ms = 0.0;
};

// What a backend says about the model it runs; part of every cache key.
struct ModelIdentity {
  std::string name;
  std::string architecture;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int hidden = 0;
  std::string tokenizer_hash;
  nlohmann::json to_json() const;
  // The part that decides results (used in cache keys).
  std::string key() const;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual ModelIdentity identity() const = 0;
  // Throws midtune::BackendError when the evaluation cannot be completed;
  // a failure is never turned into a score.
  virtual std::vector<SampleOutput> run(const Intervention& intervention,
                                        const std::vector<BatchItem>& batch,
                                        const RunOptions& options) = 0;
  // Checks an Intervention against this model (layer/head/channel ranges);
  // throws std::invalid_argument with the reason.
  virtual void validate(const Intervention& intervention) const = 0;
};

struct BackendError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The request itself cannot be evaluated (a prompt longer than the model's
// context, values that overflow the model's arithmetic): a retry, here or on
// another server, would fail the same way.
struct InvalidInputError : BackendError {
  using BackendError::BackendError;
};

const char* to_string(Mode mode);
Mode mode_from_string(const std::string& text);  // throws std::invalid_argument

}  // namespace midtune
