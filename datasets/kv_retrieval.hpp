// KV retrieval in the "Lost in the Middle" format (Liu et al., TACL 2024):
// kv-retrieval-*.jsonl.gz lines hold `ordered_kv_records` (list of
// [key, value] UUID pairs), `key` and `value` (the gold pair).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "datasets/hashing.hpp"

namespace midtune::datasets {

struct KvItem {
  std::string id;  // "<file name>:<line>" or "kv-gen:<stream>:<index>"
  std::vector<std::pair<std::string, std::string>> records;
  std::string key;
  std::string value;
  // Where the item came from, for error messages ("" / 0 when generated).
  std::string source_file;
  std::size_t source_line = 0;

  std::size_t gold_index() const;  // index of `key` in records
};

struct KvFile {
  std::vector<KvItem> items;
  std::uint64_t content_hash = 0;
};

// Throws DatasetError on a malformed file: missing or mistyped fields, fewer
// than 2 records, duplicate keys, gold key absent or its value disagreeing.
KvFile read_kv_file(const std::string& path);
void write_kv_file(const std::string& path, const std::vector<KvItem>& items);

// `pairs` UUID4 keys and values (pairs >= 2), the gold pair drawn uniformly.
KvItem generate_kv_item(std::uint64_t seed, std::size_t pairs, std::string id);

// The same item with the gold pair removed and re-inserted at `index` (the
// other pairs keep their order, as in the paper's data script). Throws
// DatasetError (field "gold_index") when index >= records.size().
KvItem with_gold_at(const KvItem& item, std::size_t index);

// The gold pair plus `pairs - 1` of the others drawn with `seed`, original
// order kept. Throws DatasetError when the item has fewer than `pairs` pairs.
KvItem subsample_pairs(const KvItem& item, std::size_t pairs, std::uint64_t seed);

}  // namespace midtune::datasets
