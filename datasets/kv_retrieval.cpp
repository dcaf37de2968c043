#include "datasets/kv_retrieval.hpp"

#include <algorithm>
#include <unordered_set>

#include "datasets/dataset_error.hpp"
#include "datasets/json_fields.hpp"
#include "datasets/jsonl_file.hpp"
#include "datasets/reorder.hpp"

namespace midtune::datasets {
namespace {

KvItem parse_kv_record(const std::string& path, const JsonLine& line) {
  const RecordReader reader(path, line);
  KvItem item;
  item.id = reader.item_id();
  item.source_file = path;
  item.source_line = line.line_number;
  const auto& records = reader.array_field("ordered_kv_records");
  std::unordered_set<std::string> seen;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const std::string field = "ordered_kv_records[" + std::to_string(i) + "]";
    const auto& pair = records[i];
    if (!pair.is_array() || pair.size() != 2) reader.fail(field, "expected a [key, value] pair");
    std::string key = reader.as_string(pair[0], field + "[0]");
    std::string value = reader.as_string(pair[1], field + "[1]");
    if (!seen.insert(key).second) reader.fail(field, "duplicate key \"" + key + "\"");
    item.records.emplace_back(std::move(key), std::move(value));
  }
  if (item.records.size() < 2) reader.fail("ordered_kv_records", "needs at least 2 pairs");
  item.key = reader.string_field("key");
  item.value = reader.string_field("value");
  if (!seen.contains(item.key)) reader.fail("key", "gold key \"" + item.key + "\" is not in ordered_kv_records");
  if (item.records[item.gold_index()].second != item.value) {
    reader.fail("value", "disagrees with the value stored for the gold key in ordered_kv_records");
  }
  return item;
}

}  // namespace

std::size_t KvItem::gold_index() const {
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (records[i].first == key) return i;
  }
  throw DatasetError(source_file.empty() ? id : source_file, source_line, "key",
                     "gold key not among the records");
}

KvFile read_kv_file(const std::string& path) {
  const JsonlContents contents = read_jsonl(path);
  return {parse_records<KvItem>(path, contents, parse_kv_record), contents.content_hash};
}

void write_kv_file(const std::string& path, const std::vector<KvItem>& items) {
  std::vector<nlohmann::json> lines;
  lines.reserve(items.size());
  for (const auto& item : items) {
    nlohmann::json records = nlohmann::json::array();
    for (const auto& [key, value] : item.records) records.push_back({key, value});
    lines.push_back({{"ordered_kv_records", records}, {"key", item.key}, {"value", item.value}});
  }
  write_jsonl(path, lines);
}

KvItem generate_kv_item(std::uint64_t seed, std::size_t pairs, std::string id) {
  if (pairs < 2) throw std::invalid_argument("kv generator: pairs must be >= 2, got " + std::to_string(pairs));
  SplitMix64 rng(seed);
  KvItem item;
  item.id = std::move(id);
  item.records.reserve(pairs);
  for (std::size_t i = 0; i < pairs; ++i) {
    std::string key = uuid4(rng);
    std::string value = uuid4(rng);
    item.records.emplace_back(std::move(key), std::move(value));
  }
  const auto& gold = item.records[rng.below(pairs)];
  item.key = gold.first;
  item.value = gold.second;
  return item;
}

KvItem with_gold_at(const KvItem& item, std::size_t index) {
  if (index >= item.records.size()) {
    throw DatasetError(item.source_file.empty() ? item.id : item.source_file, item.source_line, "gold_index",
                       "index " + std::to_string(index) + " out of range for " +
                           std::to_string(item.records.size()) + " pairs");
  }
  KvItem moved = item;
  moved.records = moved_element(item.records, item.gold_index(), index);
  return moved;
}

KvItem subsample_pairs(const KvItem& item, std::size_t pairs, std::uint64_t seed) {
  if (pairs < 2 || pairs > item.records.size()) {
    throw DatasetError(item.source_file.empty() ? item.id : item.source_file, item.source_line,
                       "ordered_kv_records",
                       "cannot take " + std::to_string(pairs) + " pairs from an item with " +
                           std::to_string(item.records.size()));
  }
  const std::size_t gold = item.gold_index();
  std::vector<std::size_t> others;
  for (std::size_t i = 0; i < item.records.size(); ++i) {
    if (i != gold) others.push_back(i);
  }
  // Partial Fisher-Yates: the first pairs-1 entries become a uniform sample.
  SplitMix64 rng(seed);
  for (std::size_t i = 0; i + 1 < pairs; ++i) {
    std::swap(others[i], others[i + rng.below(others.size() - i)]);
  }
  std::vector<std::size_t> keep(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(pairs - 1));
  keep.push_back(gold);
  std::sort(keep.begin(), keep.end());
  KvItem sampled = item;
  sampled.records.clear();
  for (std::size_t index : keep) sampled.records.push_back(item.records[index]);
  return sampled;
}

}  // namespace midtune::datasets
