#include "datasets/mdqa.hpp"

#include <algorithm>
#include <iostream>
#include <unordered_set>

#include "datasets/dataset_error.hpp"
#include "datasets/hashing.hpp"
#include "datasets/json_fields.hpp"
#include "datasets/jsonl_file.hpp"
#include "datasets/reorder.hpp"
#include "datasets/scoring.hpp"

namespace midtune::datasets {
namespace {

bool optional_bool(const RecordReader& reader, const nlohmann::json& object, const std::string& name,
                   const std::string& field, bool* present) {
  const auto found = object.find(name);
  *present = found != object.end() && !found->is_null();
  if (!*present) return false;
  if (!found->is_boolean()) reader.fail(field, std::string("expected true/false, got ") + found->type_name());
  return found->get<bool>();
}

QaItem parse_qa_record(const std::string& path, const JsonLine& line) {
  const RecordReader reader(path, line);
  QaItem item;
  item.id = reader.item_id();
  item.source_file = path;
  item.source_line = line.line_number;
  item.question = reader.string_field("question");
  if (item.question.empty()) reader.fail("question", "is empty");
  item.answers = reader.string_list("answers");
  if (item.answers.empty()) reader.fail("answers", "is empty");
  const auto& ctxs = reader.array_field("ctxs");
  if (ctxs.empty()) reader.fail("ctxs", "is empty");
  std::size_t with_isgold = 0;
  std::size_t gold_count = 0;
  for (std::size_t i = 0; i < ctxs.size(); ++i) {
    const std::string field = "ctxs[" + std::to_string(i) + "]";
    const auto& ctx = ctxs[i];
    if (!ctx.is_object()) reader.fail(field, std::string("expected an object, got ") + ctx.type_name());
    QaDocument document;
    const auto title = ctx.find("title");
    if (title == ctx.end()) reader.fail(field + ".title", "missing");
    document.title = reader.as_string(*title, field + ".title");
    const auto text = ctx.find("text");
    if (text == ctx.end()) reader.fail(field + ".text", "missing");
    document.text = reader.as_string(*text, field + ".text");
    bool present = false;
    document.hasanswer = optional_bool(reader, ctx, "hasanswer", field + ".hasanswer", &present);
    document.isgold = optional_bool(reader, ctx, "isgold", field + ".isgold", &present);
    with_isgold += present ? 1 : 0;
    gold_count += document.isgold ? 1 : 0;
    item.ctxs.push_back(std::move(document));
  }
  if (with_isgold > 0 && gold_count != 1) {
    reader.fail("ctxs", "expected exactly one document with isgold: true, found " + std::to_string(gold_count));
  }
  if (with_isgold == 0) {
    bool found = false;
    for (auto& document : item.ctxs) {
      if (document.hasanswer) {
        document.isgold = found = true;
        break;
      }
    }
    if (!found) reader.fail("ctxs", "no gold document (no isgold: true and no hasanswer: true)");
  }
  return item;
}

[[noreturn]] void item_error(const QaItem& item, const std::string& field, const std::string& reason) {
  throw DatasetError(item.source_file.empty() ? item.id : item.source_file, item.source_line, field, reason);
}

// Whole-word match on normalised text: a one-letter answer such as "S" must
// not rule out every document.
bool mentions_any_answer(const QaDocument& document, const std::vector<std::string>& answers) {
  const std::string text = " " + normalize_answer(document.title + " " + document.text) + " ";
  for (const auto& answer : answers) {
    const std::string normalized = normalize_answer(answer);
    if (!normalized.empty() && text.find(" " + normalized + " ") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::size_t QaItem::gold_index() const {
  for (std::size_t i = 0; i < ctxs.size(); ++i) {
    if (ctxs[i].isgold) return i;
  }
  item_error(*this, "ctxs", "no gold document");
}

QaFile read_qa_file(const std::string& path) {
  const JsonlContents contents = read_jsonl(path);
  QaFile file{parse_records<QaItem>(path, contents, parse_qa_record), contents.content_hash};
  const QaItem* first = nullptr;
  for (const QaItem& item : file.items) {
    const bool answerable = std::any_of(item.ctxs.begin(), item.ctxs.end(), [&](const QaDocument& document) {
      return mentions_any_answer(document, item.answers);
    });
    if (answerable) continue;
    ++file.answer_in_no_document;
    if (first == nullptr) first = &item;
  }
  if (first != nullptr) {
    std::cerr << "warning: " << path << ": " << file.answer_in_no_document << " of " << file.items.size()
              << " questions have no answer that appears in any of their documents (first: line "
              << first->source_line << ", id '" << first->id << "'); they can only be answered from memory\n";
  }
  return file;
}

QaItem with_gold_document_at(const QaItem& item, std::size_t index) {
  if (index >= item.ctxs.size()) {
    item_error(item, "gold_index",
               "index " + std::to_string(index) + " out of range for " + std::to_string(item.ctxs.size()) +
                   " documents");
  }
  QaItem moved = item;
  moved.ctxs = moved_element(item.ctxs, item.gold_index(), index);
  return moved;
}

QaItem first_documents(const QaItem& item, std::size_t documents) {
  if (documents == 0 || documents > item.ctxs.size()) {
    item_error(item, "ctxs",
               "cannot take " + std::to_string(documents) + " documents from an item with " +
                   std::to_string(item.ctxs.size()) +
                   (item.ctxs.size() == 1 ? " (a gold-only file: use other questions' gold documents as distractors)"
                                          : ""));
  }
  QaItem taken = item;
  taken.ctxs.clear();
  const std::size_t gold = item.gold_index();
  for (std::size_t i = 0; i < item.ctxs.size() && taken.ctxs.size() < documents; ++i) {
    // Keep room for the gold document when it comes later than the cut.
    if (i == gold || taken.ctxs.size() + (i < gold ? 1 : 0) < documents) taken.ctxs.push_back(item.ctxs[i]);
  }
  return taken;
}

QaItem with_other_questions_as_distractors(const std::vector<QaItem>& pool, std::size_t item_index,
                                           std::size_t documents, std::uint64_t seed) {
  if (item_index >= pool.size()) throw std::out_of_range("item index beyond the pool");
  const QaItem& item = pool[item_index];
  if (documents == 0) item_error(item, "ctxs", "documents must be >= 1");
  QaItem built = item;
  const QaDocument& gold = item.ctxs[item.gold_index()];
  built.ctxs = {gold};
  std::vector<std::size_t> candidates(pool.size());
  for (std::size_t i = 0; i < pool.size(); ++i) candidates[i] = i;
  std::unordered_set<std::string> titles = {gold.title};
  SplitMix64 rng(seed);
  for (std::size_t i = 0; i < candidates.size() && built.ctxs.size() < documents; ++i) {
    std::swap(candidates[i], candidates[i + rng.below(candidates.size() - i)]);
    if (candidates[i] == item_index) continue;
    const QaDocument& other = pool[candidates[i]].ctxs[pool[candidates[i]].gold_index()];
    // One document per title: two questions about one page share its text.
    if (titles.contains(other.title) || mentions_any_answer(other, item.answers)) continue;
    titles.insert(other.title);
    QaDocument distractor = other;
    distractor.isgold = false;
    distractor.hasanswer = false;
    built.ctxs.push_back(std::move(distractor));
  }
  if (built.ctxs.size() < documents) {
    item_error(item, "ctxs",
               "only " + std::to_string(built.ctxs.size() - 1) + " usable distractors in the file, need " +
                   std::to_string(documents - 1));
  }
  return built;
}

}  // namespace midtune::datasets
