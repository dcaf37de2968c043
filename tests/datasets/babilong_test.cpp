#include "datasets/babilong.hpp"

#include <gtest/gtest.h>

#include "datasets/dataset_error.hpp"
#include "datasets/scoring.hpp"
#include "test_files.hpp"

namespace midtune::datasets {
namespace {

using testing::expect_dataset_error;
using testing::fixture;
using testing::ScratchDir;

TEST(BabilongFile, ReadsTheFixture) {
  const auto file = read_babilong_file(fixture("babilong-qa2-fixture.jsonl"));
  ASSERT_EQ(file.items.size(), 12u);
  for (const auto& item : file.items) {
    const auto& locations = babilong_qa2_locations();
    EXPECT_NE(std::find(locations.begin(), locations.end(), item.target), locations.end());
    EXPECT_NE(item.input.find(item.target), std::string::npos);
  }
  EXPECT_EQ(file.items[0].question, "Where is the lantern?");
}

TEST(BabilongFile, BadRecords) {
  ScratchDir dir;
  const auto missing = expect_dataset_error(
      [&] { read_babilong_file(dir.write_plain("a.jsonl", R"({"input": "x", "question": "q"})" "\n")); });
  EXPECT_EQ(missing.field(), "target");
  EXPECT_EQ(missing.line(), 1u);
  const auto typed = expect_dataset_error([&] {
    read_babilong_file(dir.write_plain("b.jsonl", "\n" R"({"input": ["x"], "question": "q", "target": "t"})" "\n"));
  });
  EXPECT_EQ(typed.field(), "input");
  EXPECT_EQ(typed.line(), 2u);
  const auto empty = expect_dataset_error([&] {
    read_babilong_file(dir.write_plain("c.jsonl", R"({"input": "x", "question": "q", "target": ""})" "\n"));
  });
  EXPECT_EQ(empty.field(), "target");
}

}  // namespace
}  // namespace midtune::datasets
