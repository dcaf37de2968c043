#include "datasets/kv_retrieval.hpp"

#include <set>

#include <gtest/gtest.h>

#include "datasets/dataset_error.hpp"
#include "test_files.hpp"

namespace midtune::datasets {
namespace {

using testing::expect_dataset_error;
using testing::fixture;
using testing::ScratchDir;

TEST(KvFile, ReadsTheFixture) {
  const auto file = read_kv_file(fixture("kv-retrieval-6_keys-fixture.jsonl.gz"));
  ASSERT_EQ(file.items.size(), 10u);
  for (const auto& item : file.items) {
    EXPECT_EQ(item.records.size(), 6u);
    EXPECT_EQ(item.records[item.gold_index()].second, item.value);
  }
  EXPECT_EQ(file.items[2].id, "kv-retrieval-6_keys-fixture.jsonl.gz:3");
  EXPECT_EQ(file.items[2].source_line, 3u);
}

TEST(KvFile, WriteReadRoundTrip) {
  ScratchDir dir;
  std::vector<KvItem> items;
  for (std::uint64_t i = 0; i < 3; ++i) items.push_back(generate_kv_item(i, 4 + i, "g" + std::to_string(i)));
  write_kv_file(dir.file("kv.jsonl.gz"), items);
  const auto back = read_kv_file(dir.file("kv.jsonl.gz"));
  ASSERT_EQ(back.items.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.items[i].records, items[i].records);
    EXPECT_EQ(back.items[i].key, items[i].key);
    EXPECT_EQ(back.items[i].value, items[i].value);
  }
}

TEST(KvGenerator, DeterministicUniqueAndSized) {
  const auto a = generate_kv_item(99, 300, "a");
  const auto b = generate_kv_item(99, 300, "b");
  const auto c = generate_kv_item(100, 300, "c");
  EXPECT_EQ(a.records, b.records);
  EXPECT_EQ(a.key, b.key);
  EXPECT_NE(a.records, c.records);
  ASSERT_EQ(a.records.size(), 300u);
  std::set<std::string> keys;
  for (const auto& [key, value] : a.records) keys.insert(key);
  EXPECT_EQ(keys.size(), 300u);
  EXPECT_EQ(a.records[a.gold_index()].second, a.value);
  EXPECT_THROW(generate_kv_item(1, 1, "x"), std::invalid_argument);
}

TEST(KvGenerator, GoldIndexIsSpreadOut) {
  std::set<std::size_t> seen;
  for (std::uint64_t seed = 0; seed < 200; ++seed) seen.insert(generate_kv_item(seed, 5, "x").gold_index());
  EXPECT_EQ(seen.size(), 5u);
}

TEST(KvMove, GoldLandsAtEveryIndexOthersKeepOrder) {
  const auto item = generate_kv_item(3, 7, "x");
  for (std::size_t target = 0; target < 7; ++target) {
    const auto moved = with_gold_at(item, target);
    ASSERT_EQ(moved.gold_index(), target);
    auto others = item.records;
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(item.gold_index()));
    auto moved_others = moved.records;
    moved_others.erase(moved_others.begin() + static_cast<std::ptrdiff_t>(target));
    EXPECT_EQ(others, moved_others);
  }
  const auto error = expect_dataset_error([&] { with_gold_at(item, 7); });
  EXPECT_EQ(error.field(), "gold_index");
  EXPECT_NE(std::string(error.what()).find("out of range"), std::string::npos);
}

TEST(KvSubsample, KeepsGoldAndOrder) {
  const auto item = generate_kv_item(11, 20, "x");
  const auto small = subsample_pairs(item, 5, 4);
  ASSERT_EQ(small.records.size(), 5u);
  EXPECT_EQ(small.records[small.gold_index()].second, item.value);
  std::size_t last = 0;
  for (const auto& record : small.records) {
    std::size_t at = 0;
    while (item.records[at] != record) ++at;
    EXPECT_GE(at, last);
    last = at;
  }
  EXPECT_EQ(subsample_pairs(item, 5, 4).records, small.records);
  expect_dataset_error([&] { subsample_pairs(item, 21, 4); });
}

using BadKvCase = testing::BadRecordCase;

class KvBadRecord : public ::testing::TestWithParam<BadKvCase> {};

TEST_P(KvBadRecord, NamesFileLineAndField) {
  ScratchDir dir;
  const std::string good =
      R"({"ordered_kv_records": [["k1", "v1"], ["k2", "v2"]], "key": "k2", "value": "v2"})";
  const auto path = dir.write_gz("kv.jsonl.gz", good + "\n" + GetParam().line + "\n");
  testing::expect_bad_record(GetParam(), path, 2u, [](const std::string& file) { read_kv_file(file); });
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KvBadRecord,
    ::testing::Values(
        BadKvCase{R"({"key": "k1", "value": "v1"})", "ordered_kv_records", "missing"},
        BadKvCase{R"({"ordered_kv_records": {"k1": "v1"}, "key": "k1", "value": "v1"})", "ordered_kv_records",
                  "expected an array"},
        BadKvCase{R"({"ordered_kv_records": [["k1", "v1"], ["k2"]], "key": "k1", "value": "v1"})",
                  "ordered_kv_records[1]", "[key, value]"},
        BadKvCase{R"({"ordered_kv_records": [["k1", 5], ["k2", "v2"]], "key": "k1", "value": "v1"})",
                  "ordered_kv_records[0][1]", "expected a string"},
        BadKvCase{R"({"ordered_kv_records": [["k1", "v1"], ["k1", "v2"]], "key": "k1", "value": "v1"})",
                  "ordered_kv_records[1]", "duplicate key"},
        BadKvCase{R"({"ordered_kv_records": [["k1", "v1"]], "key": "k1", "value": "v1"})", "ordered_kv_records",
                  "at least 2"},
        BadKvCase{R"({"ordered_kv_records": [["k1", "v1"], ["k2", "v2"]], "key": "k9", "value": "v1"})", "key",
                  "not in ordered_kv_records"},
        BadKvCase{R"({"ordered_kv_records": [["k1", "v1"], ["k2", "v2"]], "key": "k1", "value": "v2"})", "value",
                  "disagrees"},
        BadKvCase{R"({"ordered_kv_records": [["k1", "v1"], ["k2", "v2"]], "key": 1, "value": "v1"})", "key",
                  "expected a string"}));

}  // namespace
}  // namespace midtune::datasets
