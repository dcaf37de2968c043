// Multi-document QA in the "Lost in the Middle" format: nq-open-*.jsonl.gz
// lines hold `question`, `answers` (list of strings) and `ctxs` (documents
// with `title`, `text`, `hasanswer`, `isgold`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace midtune::datasets {

struct QaDocument {
  std::string title;
  std::string text;
  bool hasanswer = false;
  bool isgold = false;
};

struct QaItem {
  std::string id;  // "<file name>:<line>"
  std::string question;
  std::vector<std::string> answers;
  std::vector<QaDocument> ctxs;
  std::string source_file;
  std::size_t source_line = 0;

  std::size_t gold_index() const;  // the document with isgold
};

struct QaFile {
  std::vector<QaItem> items;
  std::uint64_t content_hash = 0;
  // Items none of whose answers appears (whole words, normalised) in any of
  // their documents: the model cannot read the answer from the context.
  // read_qa_file warns on stderr when there are any.
  std::size_t answer_in_no_document = 0;
};

// The gold document is the one with `isgold: true` (exactly one when any ctx
// carries `isgold`); files without `isgold` fall back to the first ctx with
// `hasanswer: true`. Throws DatasetError on malformed records.
QaFile read_qa_file(const std::string& path);

// The gold document removed and re-inserted at `index`; distractors keep
// their order. Throws DatasetError (field "gold_index") when out of range.
QaItem with_gold_document_at(const QaItem& item, std::size_t index);

// The gold document plus the first `documents - 1` distractors (the paper's
// files list distractors by retrieval rank). Throws DatasetError when the
// item has fewer documents.
QaItem first_documents(const QaItem& item, std::size_t documents);

// For files holding only the gold document (nq-open-oracle): an item whose
// distractors are the gold documents of `documents - 1` other questions of
// `pool`, drawn with `seed`. Candidates sharing the gold title or containing
// one of this question's answers (normalised, as whole words) are skipped. EASIER than the
// paper's retrieved distractors: they are off-topic for the question.
QaItem with_other_questions_as_distractors(const std::vector<QaItem>& pool, std::size_t item_index,
                                           std::size_t documents, std::uint64_t seed);

}  // namespace midtune::datasets
