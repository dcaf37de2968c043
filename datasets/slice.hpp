// A dataset slice: the position-controlled prompts one evaluation runs on.
// Every base item is shown once per gold position (the gold chunk moved, the
// rest unchanged), as in the Lost in the Middle protocol. Search and held-out
// splits never share a base item.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/batch_item.hpp"
#include "datasets/prompts.hpp"

namespace midtune::datasets {

enum class TaskKind { kv, mdqa, babilong };
enum class Split { search, heldout };
// Where MDQA distractors come from: the file's own (retrieved, the paper's
// setting) or other questions' gold documents (for gold-only files such as
// nq-open-oracle; easier than the paper's retrieved distractors).
enum class DistractorSource { file, other_questions };

const char* to_string(TaskKind kind);
const char* to_string(Split split);
const char* to_string(DistractorSource source);
TaskKind task_kind_from_string(std::string_view text);            // throws std::invalid_argument
Split split_from_string(std::string_view text);                   // throws std::invalid_argument
DistractorSource distractor_source_from_string(std::string_view text);  // "file" | "other-questions"

struct SliceSpec {
  TaskKind kind = TaskKind::kv;
  std::string file;                      // "" = generate (kv only)
  std::size_t chunks = 50;               // kv pairs / mdqa documents; 0 = as in the file
  std::vector<double> gold_positions = {0.0, 0.5, 1.0};  // fractions in [0, 1]
  std::size_t search_samples = 20;       // base items per position, search split
  std::size_t heldout_samples = 50;      // base items per position, held-out split
  // Held-out items per gold position where they differ (one count per
  // position, the largest equal to heldout_samples): a verdict on the middle
  // needs many items there, the ends fewer. Empty = heldout_samples at every
  // position. Position p takes the first count[p] base items, so every
  // position's items are a prefix of the same base list.
  std::vector<std::size_t> heldout_per_position;
  std::uint64_t seed = 0;
  DistractorSource distractors = DistractorSource::file;
  // Write the start of the answer into the model's turn (AnswerStart::primer)
  // for kv and babilong. Off = the papers' exact protocol.
  bool prime_answer = false;

  // Base items position p gets in `split`.
  std::size_t samples_at(Split split, std::size_t position_index) const;

  // Throws std::invalid_argument naming the field and the allowed range.
  void validate() const;
};

struct EvalSample {
  BatchItem item;
  std::string base_id;              // the underlying item, the same at every position
  std::size_t position_index = 0;   // into SliceSpec::gold_positions
  std::size_t gold_chunk = 0;       // index of the gold chunk in this prompt
  TaskKind kind = TaskKind::kv;
  std::vector<std::string> answers; // kv: {value}; mdqa: gold answers; babilong: {target}
  std::string question;             // babilong scoring ignores locations named here
};

struct Slice {
  Split split = Split::search;
  std::vector<EvalSample> samples;  // ordered by position, then base item
  // Dataset config + split + hash of the sample ids (+ prompt wrapper name):
  // equal identities mean identical prompts, so evaluation caches key on it.
  std::string identity;
  // The data the prompts came from: "generated" (the KV generator, decided
  // by the spec's seed) or "<file name>#<FNV-1a of its decompressed bytes>".
  std::string source;
};

// Fraction of the way through n chunks -> chunk index round(f * (n - 1)).
std::size_t gold_chunk_index(double fraction, std::size_t chunks);

// BatchItem::gold is the teacher-forced answer (see AnswerStart): kv the
// value, mdqa the first gold answer, babilong "The X is in the Y." (primed:
// " Y"). Builds the split. KV and MDQA: every base item at every gold position.
// BABILong: positions cannot be moved, so each item is bucketed at the
// position nearest its measured depth (the last context sentence naming the
// target) and each bucket gives search_samples / heldout_samples items. Throws DatasetError for bad files
// or too few items, std::invalid_argument for a bad spec.
Slice build_slice(const SliceSpec& spec, Split split, const PromptWrapper& wrapper);

// The protocol's correctness rule for this sample's task.
bool is_correct(const EvalSample& sample, std::string_view output);

}  // namespace midtune::datasets
