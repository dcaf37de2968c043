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

// "Where is the X?" -> "X"; "" for questions of another shape.
std::string babilong_asked_item(const std::string& question);

// Throws DatasetError on malformed records (missing or non-string fields,
// empty input/question/target). Plain .jsonl or .jsonl.gz.
BabilongFile read_babilong_file(const std::string& path);

}  // namespace midtune::datasets
