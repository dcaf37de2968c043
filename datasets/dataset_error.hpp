// DatasetError: every problem with a dataset file names the file, the line
// (1-based; 0 = the file as a whole), the JSON field and the reason.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace midtune::datasets {

class DatasetError : public std::runtime_error {
 public:
  DatasetError(std::string file, std::size_t line, std::string field, std::string reason)
      : std::runtime_error(format(file, line, field, reason)),
        file_(std::move(file)),
        line_(line),
        field_(std::move(field)),
        reason_(std::move(reason)) {}

  const std::string& file() const { return file_; }
  std::size_t line() const { return line_; }
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }

 private:
  static std::string format(const std::string& file, std::size_t line, const std::string& field,
                            const std::string& reason) {
    // append() rather than operator+: GCC 12 warns (-Wrestrict) on the latter.
    std::string text = file;
    if (line > 0) text.append(":").append(std::to_string(line));
    text.append(": ");
    if (!field.empty()) text.append("field '").append(field).append("': ");
    return text.append(reason);
  }

  std::string file_;
  std::size_t line_;
  std::string field_;
  std::string reason_;
};

}  // namespace midtune::datasets
