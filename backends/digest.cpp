#include "backends/digest.hpp"

#include <xxhash.h>

namespace midtune {

std::string xxh3_128_text(std::span<const std::byte> bytes) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes.data(), bytes.size()));
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = kDigestPrefix;
  for (const unsigned char byte : canonical.digest) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

}  // namespace midtune
