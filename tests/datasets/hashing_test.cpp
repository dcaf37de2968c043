#include "datasets/hashing.hpp"

#include <regex>
#include <set>

#include <gtest/gtest.h>

namespace midtune::datasets {
namespace {

TEST(SplitMix64, MatchesTheReferenceSequence) {
  // First outputs of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.next(), 0x06c45d188009454fULL);
}

TEST(SplitMix64, BelowStaysInRangeAndCoversIt) {
  SplitMix64 rng(42);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const auto draw = rng.below(7);
    ASSERT_LT(draw, 7u);
    seen.insert(draw);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(Fnv1a64, KnownVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  // Chaining equals hashing the concatenation.
  EXPECT_EQ(fnv1a64("bc", fnv1a64("a")), fnv1a64("abc"));
  EXPECT_EQ(hex64(0x00ab), "00000000000000ab");
}

TEST(DeriveSeed, SeparatesLabelsIndicesAndSeeds) {
  EXPECT_EQ(derive_seed(1, "x", 2), derive_seed(1, "x", 2));
  EXPECT_NE(derive_seed(1, "x", 2), derive_seed(1, "y", 2));
  EXPECT_NE(derive_seed(1, "x", 2), derive_seed(1, "x", 3));
  EXPECT_NE(derive_seed(1, "x", 2), derive_seed(2, "x", 2));
}

TEST(Uuid4, HasVersionAndVariantBits) {
  SplitMix64 rng(5);
  const std::regex shape("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const auto id = uuid4(rng);
    EXPECT_TRUE(std::regex_match(id, shape)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 200u);
}

}  // namespace
}  // namespace midtune::datasets
