// Answer scoring, exactly as docs/methods.md "Common evaluation protocol" and the
// reference scripts of the benchmarks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace midtune::datasets {

// ASCII lower-casing (bytes >= 0x80 are left alone; see normalize_answer).
std::string ascii_lower(std::string_view text);

// KV: the gold value, lower-cased, is a substring of the lower-cased output
// (Lost in the Middle, evaluate_kv_responses.py).
bool kv_correct(std::string_view output, std::string_view gold_value);

// SQuAD normalisation as used by Lost in the Middle: lower-case, drop ASCII
// punctuation, replace the words a/an/the by a space, collapse whitespace.
// Differences from Python's Unicode-aware version: only ASCII letters are
// lower-cased, and every byte >= 0x80 counts as a word character.
std::string normalize_answer(std::string_view text);

// Everything before the first '\n', stripped of surrounding whitespace.
std::string first_line(std::string_view output);

// QA: the normalised first line of the output contains any normalised gold
// answer (best_subspan_em on output.split("\n")[0].strip()).
bool qa_correct(std::string_view output, const std::vector<std::string>& gold_answers);

// bAbI qa1-qa4 answers are one of these locations (BABILong metrics.py).
const std::vector<std::string>& babilong_qa2_locations();

// BABILong: lower-case the output and keep its first sentence (up to the
// first '.'), cut at "<context>", "<example>" or "question" (the reference
// cuts at "Question" after lower-casing, which never matches; we follow the
// intent). Location words found in it, minus those named in the question,
// must be exactly {target}.
bool babilong_correct(std::string_view output, std::string_view target, std::string_view question);

}  // namespace midtune::datasets
