#include "core/experiment/config_error.hpp"

namespace midtune {
namespace {

std::string format_message(const std::filesystem::path& file, int line, int column,
                           const std::string& key_path, const std::string& reason) {
  std::string text = file.string();
  if (line > 0) {
    text.append(":").append(std::to_string(line)).append(":").append(std::to_string(column));
  }
  text.append(": ");
  if (!key_path.empty()) text.append(key_path).append(": ");
  return text.append(reason);
}

}  // namespace

ConfigError::ConfigError(std::filesystem::path file, int line, int column, std::string key_path,
                         std::string reason)
    : std::runtime_error(format_message(file, line, column, key_path, reason)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      key_path_(std::move(key_path)),
      reason_(std::move(reason)) {}

}  // namespace midtune
