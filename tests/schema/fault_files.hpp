// Helpers of the database fault tests: a file's bytes, and damage written
// into one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

namespace midtune::testing {

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Writes `length` bytes from a seeded generator over the file at the page
// boundary nearest its middle (whole pages, so the damage hits the pages'
// headers, which SQLite's quick_check reads). Returns the offset.
inline std::uintmax_t overwrite_middle_page(const std::string& path, std::size_t length, std::uint32_t seed) {
  const std::uintmax_t size = std::filesystem::file_size(path);
  const std::uintmax_t offset = size / 2 / length * length;
  if (offset + length > size) throw std::runtime_error(path + ": too small to damage its middle");
  std::mt19937 rng(seed);
  std::string noise(length, '\0');
  for (char& c : noise) c = static_cast<char>(rng() & 0xff);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(noise.data(), static_cast<std::streamsize>(noise.size()));
  if (!file) throw std::runtime_error(path + ": cannot write the damage");
  return offset;
}

}  // namespace midtune::testing
