// The one form midtune writes a digest in: "xxh3-128:<32 hex digits>" (a
// model file's content hash, a served model's identity header).
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace midtune {

inline constexpr const char* kDigestPrefix = "xxh3-128:";

// XXH3-128 of `bytes` in that form (the canonical, big-endian digest).
std::string xxh3_128_text(std::span<const std::byte> bytes);

}  // namespace midtune
