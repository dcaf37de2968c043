#include "datasets/slice.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "datasets/babilong.hpp"
#include "datasets/dataset_error.hpp"
#include "datasets/hashing.hpp"
#include "datasets/kv_retrieval.hpp"
#include "datasets/mdqa.hpp"
#include "datasets/scoring.hpp"

namespace midtune::datasets {
namespace {

std::string shortest(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

// Indices of `items` in the split order of `seed` (by hash of the item id).
template <typename Item>
std::vector<std::size_t> split_order(const std::vector<Item>& items, std::uint64_t seed) {
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed;
  keyed.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    keyed.emplace_back(derive_seed(seed, "split-order", fnv1a64(items[i].id)), i);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::size_t> order;
  for (const auto& [key, index] : keyed) order.push_back(index);
  return order;
}

// Held-out takes the first `heldout` entries of `ordered`, search the next
// `search`, so the two never overlap and the held-out set does not change
// when the search size does.
template <typename T>
std::vector<T> take_split(const std::vector<T>& ordered, Split split, std::size_t search, std::size_t heldout,
                          const std::string& path, const std::string& what) {
  if (search + heldout > ordered.size()) {
    throw DatasetError(path, 0, "",
                       "needs " + std::to_string(search) + " search + " + std::to_string(heldout) + " held-out " +
                           what + ", the file has " + std::to_string(ordered.size()));
  }
  const std::size_t begin = split == Split::heldout ? 0 : heldout;
  const std::size_t count = split == Split::heldout ? heldout : search;
  return std::vector<T>(ordered.begin() + static_cast<std::ptrdiff_t>(begin),
                        ordered.begin() + static_cast<std::ptrdiff_t>(begin + count));
}

template <typename Item>
std::vector<const Item*> split_items(const std::vector<Item>& items, const std::string& path, std::uint64_t seed,
                                     Split split, std::size_t search, std::size_t heldout) {
  std::vector<const Item*> chosen;
  for (std::size_t index : take_split(split_order(items, seed), split, search, heldout, path, "items")) {
    chosen.push_back(&items[index]);
  }
  return chosen;
}

std::string sample_id(const std::string& base_id, std::size_t position_index, std::size_t gold_chunk) {
  return base_id + "#p" + std::to_string(position_index) + ":g" + std::to_string(gold_chunk);
}

double depth_of(std::size_t index, std::size_t chunks) {
  return chunks > 1 ? static_cast<double>(index) / static_cast<double>(chunks - 1) : 0.0;
}

// One base item shown with its gold chunk at `gold` of `chunks`.
struct Placement {
  std::string base_id;
  std::size_t position_index = 0;
  std::size_t gold = 0;
  std::size_t chunks = 0;
};

EvalSample placed_sample(const Placement& at, TaskKind kind, const RawPrompt& prompt, const PromptWrapper& wrapper,
                         const AnswerStart& answer, std::vector<std::string> answers, std::string question) {
  EvalSample sample;
  sample.base_id = at.base_id;
  sample.position_index = at.position_index;
  sample.gold_chunk = at.gold;
  sample.kind = kind;
  sample.item = make_batch_item(prompt, wrapper, sample_id(at.base_id, at.position_index, at.gold), answer,
                                depth_of(at.gold, at.chunks));
  sample.answers = std::move(answers);
  sample.question = std::move(question);
  return sample;
}

Placement place(const SliceSpec& spec, const std::string& base_id, std::size_t position_index, std::size_t chunks) {
  return {base_id, position_index, gold_chunk_index(spec.gold_positions[position_index], chunks), chunks};
}

void add_kv_sample(const SliceSpec& spec, const KvItem& base, const PromptWrapper& wrapper, Slice& slice,
                   std::size_t position_index) {
  const Placement at = place(spec, base.id, position_index, base.records.size());
  const KvItem moved = with_gold_at(base, at.gold);
  slice.samples.push_back(
      placed_sample(at, TaskKind::kv, kv_prompt(moved.records, moved.key), wrapper,
                    kv_answer_start(base.key, base.value, spec.prime_answer), {base.value}, ""));
}

void add_qa_sample(const SliceSpec& spec, const QaItem& base, const PromptWrapper& wrapper, Slice& slice,
                   std::size_t position_index) {
  const Placement at = place(spec, base.id, position_index, base.ctxs.size());
  const QaItem moved = with_gold_document_at(base, at.gold);
  slice.samples.push_back(placed_sample(at, TaskKind::mdqa, qa_prompt(moved.question, moved.ctxs), wrapper,
                                        {"", base.answers.front()}, base.answers, base.question));
}

std::string file_source(const std::string& path, std::uint64_t content_hash) {
  return std::filesystem::path(path).filename().string() + "#" + hex64(content_hash);
}

// Lays out base items position by position (the documented slice order),
// position p the first samples_at(split, p) of them.
template <typename Item, typename Add>
void add_all_positions(const SliceSpec& spec, Split split, const std::vector<Item>& bases, Add add) {
  for (std::size_t p = 0; p < spec.gold_positions.size(); ++p) {
    const std::size_t count = std::min(bases.size(), spec.samples_at(split, p));
    for (std::size_t i = 0; i < count; ++i) add(bases[i], p);
  }
}

void build_kv(const SliceSpec& spec, Split split, const PromptWrapper& wrapper, Slice& slice,
              std::string& source) {
  const std::size_t count = split == Split::search ? spec.search_samples : spec.heldout_samples;
  std::vector<KvItem> bases;
  if (spec.file.empty()) {
    source = "generated";
    // Each split has its own stream, so no generated item is in both.
    const std::string stream = std::string("kv-gen-") + to_string(split);
    for (std::size_t j = 0; j < count; ++j) {
      bases.push_back(generate_kv_item(derive_seed(spec.seed, stream, j), spec.chunks,
                                       "kv-gen:" + std::string(to_string(split)) + ":" + std::to_string(j)));
    }
  } else {
    const KvFile file = read_kv_file(spec.file);
    source = file_source(spec.file, file.content_hash);
    for (const KvItem* item :
         split_items(file.items, spec.file, spec.seed, split, spec.search_samples, spec.heldout_samples)) {
      const bool keep_all = spec.chunks == 0 || spec.chunks == item->records.size();
      bases.push_back(keep_all ? *item
                               : subsample_pairs(*item, spec.chunks,
                                                 derive_seed(spec.seed, "kv-subsample", fnv1a64(item->id))));
    }
  }
  add_all_positions(spec, split, bases, [&](const KvItem& base, std::size_t p) {
    add_kv_sample(spec, base, wrapper, slice, p);
  });
}

void build_mdqa(const SliceSpec& spec, Split split, const PromptWrapper& wrapper, Slice& slice,
                std::string& source) {
  const QaFile file = read_qa_file(spec.file);
  source = file_source(spec.file, file.content_hash);
  std::vector<QaItem> bases;
  for (const QaItem* item :
       split_items(file.items, spec.file, spec.seed, split, spec.search_samples, spec.heldout_samples)) {
    if (spec.distractors == DistractorSource::other_questions) {
      const auto index = static_cast<std::size_t>(item - file.items.data());
      bases.push_back(with_other_questions_as_distractors(
          file.items, index, spec.chunks, derive_seed(spec.seed, "mdqa-distractors", fnv1a64(item->id))));
    } else {
      bases.push_back(spec.chunks == 0 ? *item : first_documents(*item, spec.chunks));
    }
    if (bases.back().ctxs.size() < 2) {
      throw DatasetError(spec.file, item->source_line, "ctxs",
                         "only 1 document per question: set distractors to other-questions to use other "
                         "questions' gold documents as distractors");
    }
  }
  add_all_positions(spec, split, bases, [&](const QaItem& base, std::size_t p) {
    add_qa_sample(spec, base, wrapper, slice, p);
  });
}

std::size_t nearest_position(const std::vector<double>& positions, double depth) {
  std::size_t best = 0;
  for (std::size_t p = 1; p < positions.size(); ++p) {
    if (std::abs(positions[p] - depth) < std::abs(positions[best] - depth)) best = p;
  }
  return best;
}

// BABILong gold positions cannot be moved: each item is bucketed at the
// position nearest its measured depth, and every bucket is split on its own
// (held-out first), so each position gets its configured sample count.
void build_babilong(const SliceSpec& spec, Split split, const PromptWrapper& wrapper, Slice& slice,
                    std::string& source) {
  const BabilongFile file = read_babilong_file(spec.file);
  source = file_source(spec.file, file.content_hash);
  std::vector<std::vector<EvalSample>> buckets(spec.gold_positions.size());
  for (std::size_t index : split_order(file.items, spec.seed)) {
    const BabilongItem& item = file.items[index];
    const RawPrompt prompt = babilong_prompt(item.input, item.question);
    const std::string target = ascii_lower(item.target);
    std::size_t last_mention = 0;
    for (std::size_t c = 0; c < prompt.chunks.size(); ++c) {
      const auto& span = prompt.chunks[c];
      if (ascii_lower(std::string_view(prompt.text).substr(span.begin, span.end - span.begin)).find(target) !=
          std::string::npos) {
        last_mention = c;
      }
    }
    const double depth = depth_of(last_mention, prompt.chunks.size());
    const Placement at{item.id, nearest_position(spec.gold_positions, depth), last_mention, prompt.chunks.size()};
    EvalSample sample =
        placed_sample(at, TaskKind::babilong, prompt, wrapper,
                      babilong_answer_start(item.question, item.target, spec.prime_answer), {item.target}, item.question);
    buckets[at.position_index].push_back(std::move(sample));
  }
  for (std::size_t p = 0; p < buckets.size(); ++p) {
    const std::string what = "items whose target sits nearest position " + shortest(spec.gold_positions[p]);
    for (auto& sample :
         take_split(buckets[p], split, spec.search_samples, spec.samples_at(Split::heldout, p), spec.file, what)) {
      slice.samples.push_back(std::move(sample));
    }
  }
}

}  // namespace

const char* to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::kv: return "kv";
    case TaskKind::mdqa: return "mdqa";
    case TaskKind::babilong: return "babilong";
  }
  return "?";
}

const char* to_string(Split split) { return split == Split::search ? "search" : "heldout"; }

const char* to_string(DistractorSource source) {
  return source == DistractorSource::file ? "file" : "other-questions";
}

TaskKind task_kind_from_string(std::string_view text) {
  if (text == "kv") return TaskKind::kv;
  if (text == "mdqa") return TaskKind::mdqa;
  if (text == "babilong") return TaskKind::babilong;
  throw std::invalid_argument("dataset kind '" + std::string(text) + "': expected kv, mdqa or babilong");
}

Split split_from_string(std::string_view text) {
  if (text == "search") return Split::search;
  if (text == "heldout") return Split::heldout;
  throw std::invalid_argument("split '" + std::string(text) + "': expected search or heldout");
}

DistractorSource distractor_source_from_string(std::string_view text) {
  if (text == "file") return DistractorSource::file;
  if (text == "other-questions") return DistractorSource::other_questions;
  throw std::invalid_argument("distractors '" + std::string(text) + "': expected file or other-questions");
}

std::size_t SliceSpec::samples_at(Split split, std::size_t position_index) const {
  if (split == Split::search) return search_samples;
  return heldout_per_position.empty() ? heldout_samples : heldout_per_position.at(position_index);
}

void SliceSpec::validate() const {
  if (gold_positions.empty()) throw std::invalid_argument("dataset.gold_positions: needs at least one position");
  if (!heldout_per_position.empty()) {
    if (heldout_per_position.size() != gold_positions.size()) {
      throw std::invalid_argument("dataset.heldout_samples: " + std::to_string(heldout_per_position.size()) +
                                  " counts for " + std::to_string(gold_positions.size()) +
                                  " gold positions (one count per position, or one number for all)");
    }
    if (*std::max_element(heldout_per_position.begin(), heldout_per_position.end()) != heldout_samples) {
      throw std::invalid_argument("dataset.heldout_samples: the largest per-position count must equal "
                                  "heldout_samples (" + std::to_string(heldout_samples) + ")");
    }
  }
  for (double f : gold_positions) {
    if (!(f >= 0.0 && f <= 1.0)) {
      throw std::invalid_argument("dataset.gold_positions: " + shortest(f) + " is outside [0, 1]");
    }
  }
  if (search_samples == 0 && heldout_samples == 0) {
    throw std::invalid_argument("dataset.search_samples / heldout_samples: both are 0");
  }
  if (kind != TaskKind::kv && file.empty()) {
    throw std::invalid_argument(std::string("dataset.file: required for kind ") + to_string(kind));
  }
  if (kind == TaskKind::kv && file.empty() && chunks < 2) {
    throw std::invalid_argument("dataset.pairs: the generator needs >= 2 pairs, got " + std::to_string(chunks));
  }
  if (distractors == DistractorSource::other_questions && (kind != TaskKind::mdqa || chunks < 2)) {
    throw std::invalid_argument("dataset.distractors: other-questions needs kind mdqa and documents >= 2");
  }
}

std::size_t gold_chunk_index(double fraction, std::size_t chunks) {
  if (chunks == 0) throw std::invalid_argument("gold_chunk_index: no chunks");
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw std::invalid_argument("gold position " + shortest(fraction) + " is outside [0, 1]");
  }
  return static_cast<std::size_t>(std::llround(fraction * static_cast<double>(chunks - 1)));
}

Slice build_slice(const SliceSpec& spec, Split split, const PromptWrapper& wrapper) {
  spec.validate();
  Slice slice;
  slice.split = split;
  std::string source;
  switch (spec.kind) {
    case TaskKind::kv: build_kv(spec, split, wrapper, slice, source); break;
    case TaskKind::mdqa: build_mdqa(spec, split, wrapper, slice, source); break;
    case TaskKind::babilong: build_babilong(spec, split, wrapper, slice, source); break;
  }
  std::uint64_t ids_hash = fnv1a64("");
  for (const auto& sample : slice.samples) ids_hash = fnv1a64(sample.item.id + "\n", ids_hash);
  std::string positions;
  for (double f : spec.gold_positions) positions += (positions.empty() ? "" : ",") + shortest(f);
  // One count, or the held-out counts per position ("40/100/40").
  std::string samples = std::to_string(split == Split::search ? spec.search_samples : spec.heldout_samples);
  if (split == Split::heldout && !spec.heldout_per_position.empty()) {
    samples.clear();
    for (std::size_t count : spec.heldout_per_position) samples += (samples.empty() ? "" : "/") + std::to_string(count);
  }
  // "datasets-v1": bump when prompt text or sampling changes, so old caches miss.
  slice.identity = std::string("datasets-v1;kind=") + to_string(spec.kind) + ";source=" + source +
                   ";chunks=" + std::to_string(spec.chunks) + ";distractors=" + to_string(spec.distractors) +
                   ";primed=" + (spec.prime_answer ? "1" : "0") +
                   ";positions=" + positions + ";split=" + to_string(split) +
                   ";samples=" + samples +
                   ";seed=" + std::to_string(spec.seed) + ";wrapper=" + wrapper.name + ";ids=" + hex64(ids_hash);
  slice.source = source;
  return slice;
}

bool is_correct(const EvalSample& sample, std::string_view output) {
  switch (sample.kind) {
    case TaskKind::kv: return kv_correct(output, sample.answers.front());
    case TaskKind::mdqa: return qa_correct(output, sample.answers);
    case TaskKind::babilong: return babilong_correct(output, sample.answers.front(), sample.question);
  }
  return false;
}

}  // namespace midtune::datasets
