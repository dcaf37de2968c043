// The model file's content hash (backends/engine/gguf/content_hash.hpp):
// one byte anywhere in the file changes it, the thread count never does, and
// the on-disk cache is used for the same file version and only for it.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include "backends/engine/gguf/content_hash.hpp"
#include "backends/engine/gguf/gguf.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;

std::span<const std::byte> as_bytes(const std::vector<std::uint8_t>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

// A small valid GGUF: a name, two F32 tensors.
std::vector<std::uint8_t> small_gguf(float weight) {
  testing::TinyGgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "content-hash-test");
  std::vector<std::uint8_t> a(64 * 4, 0), b(32 * 4, 0);
  std::memcpy(b.data() + 8, &weight, 4);
  w.add_tensor("a.weight", {64}, 0, a);
  w.add_tensor("b.weight", {32}, 0, b);
  return w.bytes();
}

std::vector<std::string> cache_entries(const fs::path& dir) {
  std::vector<std::string> out;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
  return out;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class ContentHash : public testing::TempDirTest {};

TEST_F(ContentHash, OneByteAnywhereChangesItAndEqualBytesGiveEqualHashes) {
  std::vector<std::uint8_t> bytes(3 * 1024 + 7);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 31 + 7);
  const std::string reference = content_hash(as_bytes(bytes));
  EXPECT_EQ(reference.rfind("xxh3-128:", 0), 0u) << reference;
  EXPECT_EQ(reference.size(), std::string("xxh3-128:").size() + 32);
  EXPECT_EQ(content_hash(as_bytes(std::vector<std::uint8_t>(bytes))), reference);
  for (const std::size_t at : {std::size_t{0}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<std::uint8_t> edited = bytes;
    edited[at] ^= 1;
    EXPECT_NE(content_hash(as_bytes(edited)), reference) << "byte " << at;
  }
  // Trailing zeros and the empty file are told apart (the length is hashed).
  std::vector<std::uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_NE(content_hash(as_bytes(longer)), reference);
  EXPECT_NE(content_hash({}), content_hash(as_bytes(std::vector<std::uint8_t>(1, 0))));
}

TEST_F(ContentHash, TheThreadCountNeverChangesIt) {
  // Three 64 MiB chunks and a tail: each chunk is hashed by whichever thread.
  std::vector<std::uint8_t> bytes((std::size_t{3} << 26) + 12345);
  for (std::size_t i = 0; i < bytes.size(); i += 4096) bytes[i] = static_cast<std::uint8_t>(i >> 12);
  std::string one, two;
  tbb::task_arena(1).execute([&] { one = content_hash(as_bytes(bytes)); });
  tbb::task_arena(2).execute([&] { two = content_hash(as_bytes(bytes)); });
  EXPECT_EQ(one, two);
  bytes[(std::size_t{2} << 26) + 1] ^= 0x80;  // inside the third chunk
  tbb::task_arena(2).execute([&] { two = content_hash(as_bytes(bytes)); });
  EXPECT_NE(one, two);
}

TEST_F(ContentHash, TheCacheServesTheSameFileVersionAndOnlyIt) {
  const fs::path model = path("m.gguf"), cache = path("cache");
  testing::TinyGgufWriter::write(model, small_gguf(1.0f));
  std::string first;
  {
    const GgufFile file(model);
    first = gguf_content_hash(file, cache);
    EXPECT_EQ(first, content_hash(file.bytes()));
  }
  const auto entries = cache_entries(cache);
  ASSERT_EQ(entries.size(), 1u) << "one entry per file version";

  // An entry with the file's stamp is believed: plant another (well-formed)
  // hash in it and the cache, not the bytes, answers.
  const std::string entry = read_text(entries[0]);
  const std::string stamp = entry.substr(0, entry.find('\n'));
  const std::string planted = "xxh3-128:0123456789abcdef0123456789abcdef";
  std::ofstream(entries[0], std::ios::trunc) << stamp << '\n' << planted << '\n';
  EXPECT_EQ(gguf_content_hash(GgufFile(model), cache), planted);

  // A malformed entry is recomputed (and rewritten).
  std::ofstream(entries[0], std::ios::trunc) << stamp << "\nnot-a-hash\n";
  EXPECT_EQ(gguf_content_hash(GgufFile(model), cache), first);

  // The file written again with other weights is another version: its own hash.
  testing::TinyGgufWriter::write(model, small_gguf(2.0f));
  const std::string second = gguf_content_hash(GgufFile(model), cache);
  EXPECT_NE(second, first);
  EXPECT_EQ(second, content_hash(GgufFile(model).bytes()));
  EXPECT_EQ(cache_entries(cache).size(), 2u);
}

TEST_F(ContentHash, ACacheThatCannotBeWrittenOnlyCostsTime) {
  const fs::path model = path("m.gguf");
  testing::TinyGgufWriter::write(model, small_gguf(1.0f));
  // A regular file where the cache folder should be: nothing can be written there.
  std::ofstream(path("blocked")) << "x";
  const GgufFile file(model);
  EXPECT_EQ(gguf_content_hash(file, path("blocked") + "/content-hashes"), content_hash(file.bytes()));
  EXPECT_EQ(gguf_content_hash(file, ""), content_hash(file.bytes()));
}

TEST(ContentHashCache, FollowsTheSetUpScriptsCacheFolder) {
  const char* saved = std::getenv("MIDTUNE_CACHE");
  const std::string restore = saved ? saved : "";
  ::setenv("MIDTUNE_CACHE", "/some/cache", 1);
  EXPECT_EQ(default_content_hash_cache(), fs::path("/some/cache/content-hashes"));
  if (saved) ::setenv("MIDTUNE_CACHE", restore.c_str(), 1); else ::unsetenv("MIDTUNE_CACHE");
}

}  // namespace
}  // namespace midtune
