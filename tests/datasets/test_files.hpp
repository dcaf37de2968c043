// Fixture paths and scratch files for the dataset tests.
#pragma once

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "datasets/dataset_error.hpp"
#include "tests/test_paths.hpp"

namespace midtune::datasets::testing {

inline std::string fixture(const std::string& name) {
  return midtune::testing::source_dir() + "/tests/datasets/fixtures/" + name;
}

// A fresh directory per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("midtune-datasets-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

  std::string write_plain(const std::string& name, const std::string& bytes) const {
    std::ofstream(file(name), std::ios::binary) << bytes;
    return file(name);
  }
  std::string write_gz(const std::string& name, const std::string& text) const {
    gzFile out = gzopen(file(name).c_str(), "wb");
    gzwrite(out, text.data(), static_cast<unsigned>(text.size()));
    gzclose(out);
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

// Runs `body`, expects a DatasetError and returns it for inspection.
template <typename Body>
DatasetError expect_dataset_error(Body body) {
  try {
    body();
  } catch (const DatasetError& error) {
    return error;
  }
  ADD_FAILURE() << "expected a DatasetError";
  return DatasetError("", 0, "", "");
}

// One malformed JSON line and what the error must say about it.
struct BadRecordCase {
  std::string line;
  std::string field;
  std::string reason_part;
};

// Reads `path` with `read`, expecting the error BadRecordCase describes at `line`.
template <typename Read>
void expect_bad_record(const BadRecordCase& bad, const std::string& path, std::size_t line, Read read) {
  const auto error = expect_dataset_error([&] { read(path); });
  EXPECT_EQ(error.file(), path);
  EXPECT_EQ(error.line(), line);
  EXPECT_EQ(error.field(), bad.field);
  EXPECT_NE(error.reason().find(bad.reason_part), std::string::npos) << error.what();
}

}  // namespace midtune::datasets::testing
