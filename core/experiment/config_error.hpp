// ConfigError: a bad experiment file, reported as `file:line:col: key.path: reason`
// so a user can jump straight to the offending spot.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

namespace midtune {

class ConfigError : public std::runtime_error {
 public:
  // line and column are 1-based; 0 when unknown (e.g. the file cannot be read).
  // key_path is dotted (`search.ga.mutation_y`), empty for syntax errors.
  ConfigError(std::filesystem::path file, int line, int column, std::string key_path,
              std::string reason);

  const std::filesystem::path& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& key_path() const { return key_path_; }
  const std::string& reason() const { return reason_; }

 private:
  std::filesystem::path file_;
  int line_;
  int column_;
  std::string key_path_;
  std::string reason_;
};

}  // namespace midtune
