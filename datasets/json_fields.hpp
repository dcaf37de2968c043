// Typed access to the fields of one JSON-lines record; every failure is a
// DatasetError naming file, line, field and what was found instead.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/jsonl_file.hpp"

namespace midtune::datasets {

class RecordReader {
 public:
  RecordReader(const std::string& path, const JsonLine& line) : path_(path), line_(line) {}

  const nlohmann::json& required(const std::string& field) const;
  std::string string_field(const std::string& field) const;
  std::vector<std::string> string_list(const std::string& field) const;
  const nlohmann::json& array_field(const std::string& field) const;

  // Checks `value` (found at `field`, e.g. "ctxs[3].title") is a string.
  std::string as_string(const nlohmann::json& value, const std::string& field) const;
  [[noreturn]] void fail(const std::string& field, const std::string& reason) const;

  const std::string& path() const { return path_; }
  // "<file name>:<line>": the id of the item this record holds.
  std::string item_id() const;
  std::size_t line() const { return line_.line_number; }

 private:
  const std::string& path_;
  const JsonLine& line_;
};

}  // namespace midtune::datasets
