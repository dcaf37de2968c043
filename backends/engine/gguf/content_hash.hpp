// A model file's content identity: XXH3-128 over every byte of the file
// (header, metadata, tensor table and tensor data). Two files that differ in
// one weight, one quantisation or one metadata value (a RoPE base, a norm
// epsilon) differ here, so they never share a cached evaluation or resume
// each other's search, whatever their `general.name` says.
//
// Hashing reads the whole file once; the result is cached on disk under the
// file's FileStamp (device, inode, size, modification and status-change
// times), so a model is hashed once per file version, not once per run.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

#include "backends/engine/gguf/gguf.hpp"

namespace midtune {

// "xxh3-128:<32 hex digits>". The bytes are hashed in fixed 64 MiB chunks in
// parallel, then the chunk digests in order, so the value depends on the
// bytes only, never on the thread count.
std::string content_hash(std::span<const std::byte> bytes);

// Where hashes are cached: $MIDTUNE_CACHE, else $XDG_CACHE_HOME/midtune,
// else ~/.cache/midtune (the set-up scripts' cache), plus /content-hashes.
std::filesystem::path default_content_hash_cache();

// content_hash(file.bytes()), read from `cache_dir` when an entry for the
// file's stamp is there, stored there when not. A cache that cannot be read
// or written is skipped (the hash is then computed every time), never an
// error: it only saves time.
std::string gguf_content_hash(const GgufFile& file,
                              const std::filesystem::path& cache_dir = default_content_hash_cache());

}  // namespace midtune
