#include "datasets/jsonl_file.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "test_files.hpp"

namespace midtune::datasets {
namespace {

using testing::expect_dataset_error;
using testing::ScratchDir;

TEST(Jsonl, ReadsGzipAndPlainWithLineNumbers) {
  ScratchDir dir;
  const std::string text = "{\"a\": 1}\n\n{\"a\": 2}\n";
  for (const auto& path : {dir.write_gz("x.jsonl.gz", text), dir.write_plain("x.jsonl", text)}) {
    const auto contents = read_jsonl(path);
    ASSERT_EQ(contents.records.size(), 2u);
    EXPECT_EQ(contents.records[0].line_number, 1u);
    EXPECT_EQ(contents.records[1].line_number, 3u);  // the blank line still counts
    EXPECT_EQ(contents.records[1].value["a"], 2);
  }
  // The content hash is of the decompressed text: both files agree.
  EXPECT_EQ(read_jsonl(dir.file("x.jsonl.gz")).content_hash, read_jsonl(dir.file("x.jsonl")).content_hash);
}

TEST(Jsonl, LastLineWithoutNewline) {
  ScratchDir dir;
  const auto contents = read_jsonl(dir.write_gz("x.jsonl.gz", "{\"a\": 1}\n{\"a\": 2}"));
  EXPECT_EQ(contents.records.size(), 2u);
}

TEST(Jsonl, WriteThenReadRoundTrips) {
  ScratchDir dir;
  const std::vector<nlohmann::json> records = {{{"k", "v\u00e9"}}, {{"n", 3}}};
  write_jsonl(dir.file("r.jsonl.gz"), records);
  const auto contents = read_jsonl(dir.file("r.jsonl.gz"));
  ASSERT_EQ(contents.records.size(), 2u);
  EXPECT_EQ(contents.records[0].value, records[0]);
  EXPECT_EQ(contents.records[1].value, records[1]);
}

TEST(Jsonl, TruncatedGzipNamesTheFile) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "{\"index\": " + std::to_string(i) + ", \"pad\": \"" + std::string(40, 'x') + "\"}\n";
  const auto path = dir.write_gz("cut.jsonl.gz", text);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  const auto error = expect_dataset_error([&] { read_jsonl(path); });
  EXPECT_EQ(error.file(), path);
  EXPECT_NE(std::string(error.what()).find("truncated"), std::string::npos) << error.what();
}

TEST(Jsonl, CorruptGzipBodyIsAnError) {
  ScratchDir dir;
  const auto path = dir.write_gz("bad.jsonl.gz", std::string(2000, 'y') + "\n");
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 6] ^= 0x5a;  // damage the CRC / size trailer
  dir.write_plain("bad.jsonl.gz", bytes);
  expect_dataset_error([&] { read_jsonl(path); });
}

TEST(Jsonl, JunkAfterTheGzipDataIsRefusedNamingTheFile) {
  ScratchDir dir;
  const auto path = dir.write_gz("junk.jsonl.gz", "{\"a\": 1}\n");
  const auto clean_size = std::filesystem::file_size(path);
  std::ofstream(path, std::ios::binary | std::ios::app) << "this is not gzip";
  const auto error = expect_dataset_error([&] { read_jsonl(path); });
  EXPECT_EQ(error.file(), path);
  EXPECT_NE(std::string(error.what()).find("junk after the end of the gzip data (at byte " +
                                           std::to_string(clean_size) + ")"),
            std::string::npos)
      << error.what();
}

TEST(Jsonl, ConcatenatedGzipMembersAreOneFile) {
  // `cat a.gz b.gz` is a valid gzip file holding both texts (gzip -d agrees).
  ScratchDir dir;
  const auto first = dir.write_gz("a.jsonl.gz", "{\"a\": 1}\n");
  const auto second = dir.write_gz("b.jsonl.gz", "{\"a\": 2}\n{\"a\": 3}\n");
  std::string bytes;
  for (const auto& part : {first, second}) {
    std::ifstream in(part, std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), {});
  }
  const auto contents = read_jsonl(dir.write_plain("ab.jsonl.gz", bytes));
  ASSERT_EQ(contents.records.size(), 3u);
  EXPECT_EQ(contents.records[2].line_number, 3u);
  EXPECT_EQ(contents.records[2].value["a"], 3);
}

TEST(Jsonl, LargeGzipFileReadsCompletely) {
  // More text than one decompression buffer, so output spans many inflate calls.
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "{\"index\": " + std::to_string(i) + "}\n";
  const auto contents = read_jsonl(dir.write_gz("big.jsonl.gz", text));
  ASSERT_EQ(contents.records.size(), 20000u);
  EXPECT_EQ(contents.records.back().value["index"], 19999);
  EXPECT_EQ(contents.content_hash, read_jsonl(dir.write_plain("big.jsonl", text)).content_hash);
}

// A small gzip file that holds one line of 64 MiB (it could as well be
// 4 GiB) is refused at the line's first 16 MiB, naming the file and the
// line, before it is held or parsed whole; the lines before it were fine.
TEST(Jsonl, AnOverlongLineIsRefusedBeforeItIsHeld) {
  ScratchDir dir;
  const std::string text = "{\"a\": 1}\n{\"padding\": \"" + std::string(std::size_t{64} << 20, 'x') + "\"}\n";
  const auto path = dir.write_gz("long.jsonl.gz", text);
  EXPECT_LT(std::filesystem::file_size(path), std::uintmax_t{1} << 20) << "the file itself is small";
  const auto error = expect_dataset_error([&] { read_jsonl(path); });
  EXPECT_EQ(error.line(), 2u);
  EXPECT_NE(std::string(error.what()).find("longer than 16 MiB"), std::string::npos) << error.what();
  EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
}

TEST(Jsonl, NotJsonNamesTheLine) {
  ScratchDir dir;
  const auto path = dir.write_gz("x.jsonl.gz", "{\"a\": 1}\n{not json\n");
  const auto error = expect_dataset_error([&] { read_jsonl(path); });
  EXPECT_EQ(error.line(), 2u);
  EXPECT_NE(std::string(error.what()).find("not valid JSON"), std::string::npos) << error.what();
}

TEST(Jsonl, RecordMustBeAnObject) {
  ScratchDir dir;
  const auto error = expect_dataset_error([&] { read_jsonl(dir.write_plain("x.jsonl", "[1, 2]\n")); });
  EXPECT_EQ(error.line(), 1u);
}

TEST(Jsonl, EmptyFileAndMissingFile) {
  ScratchDir dir;
  const auto empty = expect_dataset_error([&] { read_jsonl(dir.write_gz("e.jsonl.gz", "")); });
  EXPECT_NE(std::string(empty.what()).find("empty"), std::string::npos);
  const auto blank = expect_dataset_error([&] { read_jsonl(dir.write_plain("b.jsonl", "\n \n")); });
  EXPECT_NE(std::string(blank.what()).find("no records"), std::string::npos);
  expect_dataset_error([&] { read_jsonl(dir.file("absent.jsonl.gz")); });
}

TEST(DatasetErrorMessage, NamesFileLineFieldReason) {
  const DatasetError error("data.jsonl.gz", 7, "ctxs[2].title", "expected a string, got number");
  EXPECT_STREQ(error.what(), "data.jsonl.gz:7: field 'ctxs[2].title': expected a string, got number");
}

}  // namespace
}  // namespace midtune::datasets
