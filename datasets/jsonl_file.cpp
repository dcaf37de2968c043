#include "datasets/jsonl_file.hpp"

#include <zlib.h>

#include <array>
#include <fstream>
#include <string_view>
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

// Feeds the file's text to `consume` in chunks: gzip members decompressed
// one after another (as gzip -d does), any other file as it is. zlib's gzread
// silently drops bytes after the last member; here they are an error, since
// they mean a damaged file or two files glued together.
template <class Consume>
void read_text(const std::string& path, std::size_t& line_number, Consume&& consume) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DatasetError(path, 0, "", "cannot open file");
  std::array<char, 1 << 16> raw{};
  std::array<char, 1 << 16> text{};
  const auto read_raw = [&] {
    in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
    if (in.bad()) throw DatasetError(path, line_number, "", "read error");
    return static_cast<std::size_t>(in.gcount());
  };
  std::size_t got = read_raw();
  const bool gzip = got >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f && static_cast<unsigned char>(raw[1]) == 0x8b;
  if (!gzip) {
    for (; got > 0; got = read_raw()) consume(std::string_view(raw.data(), got));
    return;
  }
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) throw DatasetError(path, 0, "", "cannot start gzip decompression");
  const std::unique_ptr<z_stream, decltype(&inflateEnd)> guard(&zs, &inflateEnd);
  std::uint64_t raw_offset = 0;  // file offset of raw[0]
  bool member_ended = false;
  for (; got > 0; raw_offset += got, got = read_raw()) {
    zs.next_in = reinterpret_cast<Bytef*>(raw.data());
    zs.avail_in = static_cast<uInt>(got);
    while (zs.avail_in > 0) {
      if (member_ended) {
        const std::uint64_t at = raw_offset + (got - zs.avail_in);
        if (static_cast<unsigned char>(*zs.next_in) != 0x1f)
          throw DatasetError(path, line_number, "",
                             "junk after the end of the gzip data (at byte " + std::to_string(at) +
                                 "): the file is damaged or two files were joined");
        inflateReset(&zs);  // another gzip member follows
        member_ended = false;
      }
      zs.next_out = reinterpret_cast<Bytef*>(text.data());
      zs.avail_out = static_cast<uInt>(text.size());
      const int code = inflate(&zs, Z_NO_FLUSH);
      if (code != Z_OK && code != Z_STREAM_END && code != Z_BUF_ERROR)
        throw DatasetError(path, line_number, "",
                           std::string("corrupt gzip data: ") + (zs.msg != nullptr ? zs.msg : "inflate failed"));
      consume(std::string_view(text.data(), text.size() - zs.avail_out));
      if (code == Z_STREAM_END) member_ended = true;
    }
  }
  // Drain what inflate still holds for the last input.
  while (!member_ended) {
    zs.next_out = reinterpret_cast<Bytef*>(text.data());
    zs.avail_out = static_cast<uInt>(text.size());
    const int code = inflate(&zs, Z_NO_FLUSH);
    consume(std::string_view(text.data(), text.size() - zs.avail_out));
    if (code == Z_STREAM_END) member_ended = true;
    else if (code != Z_OK || zs.avail_out == text.size())
      throw DatasetError(path, line_number, "", "truncated or corrupt gzip stream (it ends inside the data)");
  }
}

}  // namespace

JsonlContents read_jsonl(const std::string& path) {
  JsonlContents contents;
  std::uint64_t hash = fnv1a64("");
  std::string line;
  std::size_t line_number = 1;
  read_text(path, line_number, [&](std::string_view chunk) {
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
    // A line is one record: a few KB in every real format, and parsing one
    // takes several times its size again. Past this it is not a dataset line
    // (a damaged file, or a file that is not JSON Lines).
    constexpr std::size_t kMaxLineBytes = std::size_t{16} << 20;
    if (line.size() > kMaxLineBytes)
      throw DatasetError(path, line_number, "",
                         "the line is longer than " + std::to_string(kMaxLineBytes >> 20) +
                             " MiB (no record of any dataset format is that large; is this a JSON Lines file?)");
  });
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
