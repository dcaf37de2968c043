#include "datasets/scoring.hpp"

#include <gtest/gtest.h>

namespace midtune::datasets {
namespace {

TEST(KvScoring, CaseInsensitiveSubstring) {
  EXPECT_TRUE(kv_correct("The value is \"ABC-def\".", "abc-DEF"));
  EXPECT_FALSE(kv_correct("abc-de", "abc-def"));
  EXPECT_FALSE(kv_correct("", "x"));
}

TEST(QaNormalize, MatchesTheSquadScript) {
  // Expected strings produced by the Python normalize_answer of Lost in the Middle.
  EXPECT_EQ(normalize_answer("The  Quick, brown FOX!"), "quick brown fox");
  EXPECT_EQ(normalize_answer("an apple a day"), "apple day");
  EXPECT_EQ(normalize_answer("theater at the end"), "theater at end");
  EXPECT_EQ(normalize_answer("A.B.C. -- the_end"), "abc theend");
  EXPECT_EQ(normalize_answer("Hello\tWorld\n(again)"), "hello world again");
  EXPECT_EQ(normalize_answer("Anne's the best"), "annes best");
  EXPECT_EQ(normalize_answer("a"), "");
  EXPECT_EQ(normalize_answer("THE"), "");
}

TEST(QaScoring, FirstLineOnly) {
  EXPECT_EQ(first_line("  Ada Kessel \nmore"), "Ada Kessel");
  EXPECT_TRUE(qa_correct("It was founded by Ada Kessel.", {"ada kessel"}));
  EXPECT_TRUE(qa_correct("The Grey Heron", {"nothing", "the grey heron"}));
  EXPECT_FALSE(qa_correct("I am not sure.\nAda Kessel", {"Ada Kessel"}));
  EXPECT_TRUE(qa_correct("seven bridges", {"Seven"}));
  EXPECT_FALSE(qa_correct("", {"x"}));
}

TEST(BabilongScoring, OnlyLocationLeft) {
  const std::string question = "Where is the lantern?";
  EXPECT_TRUE(babilong_correct("The lantern is in the Bedroom.", "bedroom", question));
  // Two locations named: not counted, even though one is right.
  EXPECT_FALSE(babilong_correct("The lantern is in the bedroom or the garden.", "bedroom", question));
  // Only the first sentence counts.
  EXPECT_TRUE(babilong_correct("The lantern is in the bedroom. Before that the garden.", "bedroom", question));
  EXPECT_FALSE(babilong_correct("The lantern is in the garden.", "bedroom", question));
  EXPECT_FALSE(babilong_correct("I do not know", "bedroom", question));
  // Locations named in the question are never answers, so they are ignored.
  EXPECT_TRUE(babilong_correct("It moved from the kitchen to the office", "office",
                               "Where was the milk after the kitchen?"));
  // Text after a new "Question" or "<example>" is dropped.
  EXPECT_TRUE(babilong_correct("bedroom\nquestion: where is the garden", "bedroom", question));
  EXPECT_TRUE(babilong_correct("bedroom <example> garden", "bedroom", question));
  EXPECT_EQ(babilong_qa2_locations().size(), 6u);
}

}  // namespace
}  // namespace midtune::datasets
