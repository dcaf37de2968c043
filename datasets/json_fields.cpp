#include "datasets/json_fields.hpp"

#include <filesystem>

#include "datasets/dataset_error.hpp"

namespace midtune::datasets {

void RecordReader::fail(const std::string& field, const std::string& reason) const {
  throw DatasetError(path_, line_.line_number, field, reason);
}

std::string RecordReader::item_id() const {
  return std::filesystem::path(path_).filename().string() + ":" + std::to_string(line_.line_number);
}

const nlohmann::json& RecordReader::required(const std::string& field) const {
  const auto found = line_.value.find(field);
  if (found == line_.value.end()) fail(field, "missing");
  return *found;
}

std::string RecordReader::as_string(const nlohmann::json& value, const std::string& field) const {
  if (!value.is_string()) fail(field, std::string("expected a string, got ") + value.type_name());
  return value.get<std::string>();
}

std::string RecordReader::string_field(const std::string& field) const {
  return as_string(required(field), field);
}

const nlohmann::json& RecordReader::array_field(const std::string& field) const {
  const auto& value = required(field);
  if (!value.is_array()) fail(field, std::string("expected an array, got ") + value.type_name());
  return value;
}

std::vector<std::string> RecordReader::string_list(const std::string& field) const {
  const auto& values = array_field(field);
  std::vector<std::string> strings;
  strings.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    strings.push_back(as_string(values[i], field + "[" + std::to_string(i) + "]"));
  }
  return strings;
}

}  // namespace midtune::datasets
