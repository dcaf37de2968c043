// Reading and writing JSON-lines files, gzip-compressed or plain (zlib's
// gzFile reads plain files transparently). Truncated or corrupt gzip streams,
// JSON syntax errors and files without records raise DatasetError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace midtune::datasets {

struct JsonLine {
  std::size_t line_number = 0;  // 1-based line in the file
  nlohmann::json value;
};

struct JsonlContents {
  std::vector<JsonLine> records;  // blank lines are skipped
  std::uint64_t content_hash = 0; // FNV-1a of the decompressed bytes (cache keys)
};

// Throws DatasetError (file, line, reason) for unreadable, truncated, non-JSON
// or empty files; every record must be a JSON object.
JsonlContents read_jsonl(const std::string& path);

// Writes one compact JSON document per line, gzip-compressed when the path
// ends in ".gz". Throws DatasetError when the file cannot be written.
void write_jsonl(const std::string& path, const std::vector<nlohmann::json>& records);

// Parses every record of `contents` with `parse(path, line)` into Items.
template <typename Item, typename Parse>
std::vector<Item> parse_records(const std::string& path, const JsonlContents& contents, Parse parse) {
  std::vector<Item> items;
  items.reserve(contents.records.size());
  for (const auto& line : contents.records) items.push_back(parse(path, line));
  return items;
}

}  // namespace midtune::datasets
