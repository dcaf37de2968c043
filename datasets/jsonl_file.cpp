#include "datasets/jsonl_file.hpp"

#include <zlib.h>

#include <array>
#include <memory>

#include "datasets/dataset_error.hpp"
#include "datasets/hashing.hpp"

namespace midtune::datasets {
namespace {

struct GzCloser {
  void operator()(gzFile_s* file) const {
    if (file != nullptr) gzclose(file);
  }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

void parse_line(const std::string& path, std::size_t line_number, const std::string& line,
                JsonlContents& contents) {
  if (is_blank(line)) return;
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& error) {
    throw DatasetError(path, line_number, "", std::string("not valid JSON: ") + error.what());
  }
  if (!value.is_object()) {
    throw DatasetError(path, line_number, "", std::string("expected a JSON object, got ") + value.type_name());
  }
  contents.records.push_back({line_number, std::move(value)});
}

}  // namespace

JsonlContents read_jsonl(const std::string& path) {
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (!file) throw DatasetError(path, 0, "", "cannot open file");
  gzbuffer(file.get(), 1 << 17);

  JsonlContents contents;
  std::uint64_t hash = fnv1a64("");
  std::string line;
  std::size_t line_number = 1;
  std::array<char, 1 << 16> buffer{};
  for (;;) {
    const int got = gzread(file.get(), buffer.data(), static_cast<unsigned>(buffer.size()));
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      throw DatasetError(path, line_number, "", std::string("corrupt gzip data: ") + message);
    }
    if (got == 0) break;
    const std::string_view chunk(buffer.data(), static_cast<std::size_t>(got));
    hash = fnv1a64(chunk, hash);
    std::size_t start = 0;
    for (std::size_t newline = chunk.find('\n'); newline != std::string_view::npos;
         newline = chunk.find('\n', start)) {
      line.append(chunk.substr(start, newline - start));
      parse_line(path, line_number, line, contents);
      line.clear();
      ++line_number;
      start = newline + 1;
    }
    line.append(chunk.substr(start));
  }
  // zlib reports a stream cut short (truncated download) as Z_BUF_ERROR at EOF.
  int code = Z_OK;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK) {
    throw DatasetError(path, line_number, "",
                       std::string("truncated or corrupt gzip stream (") + message + ")");
  }
  parse_line(path, line_number, line, contents);
  if (contents.records.empty()) throw DatasetError(path, 0, "", "file holds no records (empty)");
  contents.content_hash = hash;
  return contents;
}

void write_jsonl(const std::string& path, const std::vector<nlohmann::json>& records) {
  const bool compress = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  GzHandle file(gzopen(path.c_str(), compress ? "wb9" : "wbT"));
  if (!file) throw DatasetError(path, 0, "", "cannot open file for writing");
  for (const auto& record : records) {
    const std::string line = record.dump() + "\n";
    if (gzwrite(file.get(), line.data(), static_cast<unsigned>(line.size())) !=
        static_cast<int>(line.size())) {
      throw DatasetError(path, 0, "", "write failed");
    }
  }
  if (gzclose(file.release()) != Z_OK) throw DatasetError(path, 0, "", "closing the file failed");
}

}  // namespace midtune::datasets
