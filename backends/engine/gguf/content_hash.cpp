#include "backends/engine/gguf/content_hash.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>
#include <vector>

#include <tbb/parallel_for.h>
#include <xxhash.h>

#include "backends/digest.hpp"

namespace midtune {

namespace {

// Large enough that a 70B file is a few hundred tasks, small enough that two
// threads share a 100 MB test model.
constexpr std::size_t kChunkBytes = std::size_t{64} << 20;

bool well_formed(const std::string& hash) {
  if (hash.size() != std::string(kDigestPrefix).size() + 32 || hash.rfind(kDigestPrefix, 0) != 0) return false;
  for (std::size_t i = std::string(kDigestPrefix).size(); i < hash.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(hash[i]))) return false;
  return true;
}

// The cache entry's first line: what the file was when it was hashed.
std::string stamp_line(const FileStamp& s) {
  return "gguf-content-v1 dev=" + std::to_string(s.device) + " ino=" + std::to_string(s.inode) +
         " size=" + std::to_string(s.size) + " mtime_ns=" + std::to_string(s.mtime_ns) +
         " ctime_ns=" + std::to_string(s.ctime_ns);
}

std::filesystem::path entry_path(const std::filesystem::path& dir, const std::string& stamp) {
  const XXH64_hash_t name = XXH3_64bits(stamp.data(), stamp.size());
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(name));
  return dir / buffer;
}

}  // namespace

std::string content_hash(std::span<const std::byte> bytes) {
  const std::size_t chunks = (bytes.size() + kChunkBytes - 1) / kChunkBytes;
  std::vector<XXH128_canonical_t> digests(chunks);
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    const std::size_t begin = c * kChunkBytes;
    const std::size_t length = std::min(kChunkBytes, bytes.size() - begin);
    XXH128_canonicalFromHash(&digests[c], XXH3_128bits(bytes.data() + begin, length));
  });
  // The length first, so files that differ only in trailing chunks of zeros
  // (or an empty file) still differ.
  const std::uint64_t size = bytes.size();
  std::vector<std::byte> summary(sizeof size + digests.size() * sizeof(XXH128_canonical_t));
  std::memcpy(summary.data(), &size, sizeof size);
  if (!digests.empty())
    std::memcpy(summary.data() + sizeof size, digests.data(), digests.size() * sizeof(XXH128_canonical_t));
  return xxh3_128_text(summary);
}

std::filesystem::path default_content_hash_cache() {
  std::filesystem::path base;
  if (const char* cache = std::getenv("MIDTUNE_CACHE"); cache && *cache) {
    base = cache;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    base = std::filesystem::path(xdg) / "midtune";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = std::filesystem::path(home) / ".cache" / "midtune";
  } else {
    return {};
  }
  return base / "content-hashes";
}

std::string gguf_content_hash(const GgufFile& file, const std::filesystem::path& cache_dir) {
  const std::string stamp = stamp_line(file.stamp());
  const std::filesystem::path entry = cache_dir.empty() ? std::filesystem::path{} : entry_path(cache_dir, stamp);
  if (!entry.empty()) {
    std::ifstream in(entry);
    std::string first, hash;
    if (std::getline(in, first) && std::getline(in, hash) && first == stamp && well_formed(hash)) return hash;
  }
  const std::string hash = content_hash(file.bytes());
  if (!entry.empty()) {
    // Written aside and renamed, so a concurrent reader sees a whole entry or none.
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    const std::filesystem::path partial = entry.string() + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(partial, std::ios::trunc);
      out << stamp << '\n' << hash << '\n';
      if (!out.flush()) ec = std::make_error_code(std::errc::io_error);
    }
    if (!ec) std::filesystem::rename(partial, entry, ec);
    if (ec) std::filesystem::remove(partial, ec);
  }
  return hash;
}

}  // namespace midtune
