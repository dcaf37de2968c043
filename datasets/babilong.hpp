// BABILong (Kuratov et al., 2024) qa2 items: JSON lines with `input` (facts
// hidden in background text), `question` and `target` (a location).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace midtune::datasets {

struct BabilongItem {
  std::string id;  // "<file name>:<line>"
  std::string input;
  std::string question;
  std::string target;
  std::string source_file;
  std::size_t source_line = 0;
};

struct BabilongFile {
  std::vector<BabilongItem> items;
  std::uint64_t content_hash = 0;
};

// The answer in the format BABILong's qa2 prompt demands, for teacher-forced
// scoring: "Where is the X?" -> "The X is in the <target>." (the target alone
// when the question has another shape). Its first token is what the model
// should emit first; the bare location would never be.
std::string babilong_formatted_answer(const std::string& question, const std::string& target);

// Throws DatasetError on malformed records (missing or non-string fields,
// empty input/question/target). Plain .jsonl or .jsonl.gz.
BabilongFile read_babilong_file(const std::string& path);

}  // namespace midtune::datasets
