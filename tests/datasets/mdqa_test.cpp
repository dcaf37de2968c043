#include "datasets/mdqa.hpp"

#include <set>

#include <gtest/gtest.h>

#include "datasets/dataset_error.hpp"
#include "datasets/scoring.hpp"
#include "test_files.hpp"

namespace midtune::datasets {
namespace {

using testing::expect_dataset_error;
using testing::fixture;
using testing::ScratchDir;

TEST(QaFile, ReadsTheFixture) {
  const auto file = read_qa_file(fixture("nq-open-4_total_documents-fixture.jsonl.gz"));
  ASSERT_EQ(file.items.size(), 12u);
  for (std::size_t i = 0; i < file.items.size(); ++i) {
    const auto& item = file.items[i];
    EXPECT_EQ(item.ctxs.size(), 4u);
    EXPECT_EQ(item.gold_index(), i % 4);  // as the fixture script placed it
    EXPECT_TRUE(item.ctxs[item.gold_index()].hasanswer);
    EXPECT_FALSE(item.answers.empty());
  }
  EXPECT_EQ(file.items[1].answers.front(), "Ada Kessel");
}

TEST(QaMove, GoldToEveryIndex) {
  const auto item = read_qa_file(fixture("nq-open-4_total_documents-fixture.jsonl.gz")).items[5];
  for (std::size_t target = 0; target < 4; ++target) {
    const auto moved = with_gold_document_at(item, target);
    EXPECT_EQ(moved.gold_index(), target);
    EXPECT_EQ(moved.ctxs[target].title, item.ctxs[item.gold_index()].title);
  }
  const auto error = expect_dataset_error([&] { with_gold_document_at(item, 4); });
  EXPECT_EQ(error.field(), "gold_index");
  EXPECT_EQ(error.line(), 6u);
}

TEST(QaFirstDocuments, KeepsGoldAndLeadingDistractors) {
  const auto items = read_qa_file(fixture("nq-open-4_total_documents-fixture.jsonl.gz")).items;
  const auto late = items[3];  // gold at index 3
  const auto two = first_documents(late, 2);
  ASSERT_EQ(two.ctxs.size(), 2u);
  EXPECT_EQ(two.ctxs[0].title, late.ctxs[0].title);
  EXPECT_TRUE(two.ctxs[1].isgold);
  const auto early = first_documents(items[0], 3);
  EXPECT_EQ(early.gold_index(), 0u);
  EXPECT_EQ(early.ctxs[2].title, items[0].ctxs[2].title);
  expect_dataset_error([&] { first_documents(late, 5); });
}

TEST(QaOtherQuestionDistractors, BuildsFromGoldOnlyFile) {
  const auto pool = read_qa_file(fixture("nq-open-oracle-fixture.jsonl.gz")).items;
  ASSERT_EQ(pool[0].ctxs.size(), 1u);
  const auto built = with_other_questions_as_distractors(pool, 2, 6, 17);
  ASSERT_EQ(built.ctxs.size(), 6u);
  EXPECT_EQ(built.gold_index(), 0u);
  EXPECT_EQ(built.ctxs[0].title, pool[2].ctxs[0].title);
  std::set<std::string> titles;
  for (std::size_t i = 0; i < built.ctxs.size(); ++i) {
    titles.insert(built.ctxs[i].title);
    if (i == 0) continue;
    EXPECT_FALSE(built.ctxs[i].isgold);
    // No distractor contains this question's answer.
    EXPECT_FALSE(qa_correct(built.ctxs[i].text, pool[2].answers)) << built.ctxs[i].text;
  }
  EXPECT_EQ(titles.size(), 6u);
  const auto again = with_other_questions_as_distractors(pool, 2, 6, 17);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(again.ctxs[i].title, built.ctxs[i].title);
  const auto other_seed = with_other_questions_as_distractors(pool, 2, 6, 18);
  bool differs = false;
  for (std::size_t i = 1; i < 6; ++i) differs |= other_seed.ctxs[i].title != built.ctxs[i].title;
  EXPECT_TRUE(differs);
  const auto error = expect_dataset_error([&] { with_other_questions_as_distractors(pool, 2, 13, 1); });
  EXPECT_NE(error.reason().find("usable distractors"), std::string::npos);
}

TEST(QaOtherQuestionDistractors, SkipsDocumentsHoldingTheAnswer) {
  // Question 0's answer "red" also appears in question 1's gold text: never a distractor.
  const auto path_text =
      std::string(R"({"question": "q0", "answers": ["red"], "ctxs": [{"title": "T0", "text": "the roof is red", "isgold": true}]})") +
      "\n" + R"({"question": "q1", "answers": ["blue"], "ctxs": [{"title": "T1", "text": "a red door", "isgold": true}]})" +
      "\n" + R"({"question": "q2", "answers": ["green"], "ctxs": [{"title": "T2", "text": "a blue sky", "isgold": true}]})" +
      "\n";
  ScratchDir dir;
  const auto pool = read_qa_file(dir.write_plain("q.jsonl", path_text)).items;
  const auto built = with_other_questions_as_distractors(pool, 0, 2, 3);
  EXPECT_EQ(built.ctxs[1].title, "T2");
  expect_dataset_error([&] { with_other_questions_as_distractors(pool, 0, 3, 3); });
}

TEST(QaOtherQuestionDistractors, AnswerMatchIsWholeWord) {
  // Answer "S": "sky" and "sea" are fine distractors, "plan s" is not.
  const auto text =
      std::string(R"({"question": "q0", "answers": ["S"], "ctxs": [{"title": "T0", "text": "shape s", "isgold": true}]})") +
      "\n" + R"({"question": "q1", "answers": ["b"], "ctxs": [{"title": "T1", "text": "plan S.", "isgold": true}]})" +
      "\n" + R"({"question": "q2", "answers": ["c"], "ctxs": [{"title": "T2", "text": "sky and sea", "isgold": true}]})" +
      "\n";
  ScratchDir dir;
  const auto pool = read_qa_file(dir.write_plain("q.jsonl", text)).items;
  EXPECT_EQ(with_other_questions_as_distractors(pool, 0, 2, 5).ctxs[1].title, "T2");
  expect_dataset_error([&] { with_other_questions_as_distractors(pool, 0, 3, 5); });
}

TEST(QaFile, HasanswerFallbackWithoutIsgold) {
  ScratchDir dir;
  const auto path = dir.write_plain(
      "q.jsonl",
      R"({"question": "q", "answers": ["x"], "ctxs": [{"title": "a", "text": "t"}, {"title": "b", "text": "x", "hasanswer": true}]})"
      "\n");
  EXPECT_EQ(read_qa_file(path).items[0].gold_index(), 1u);
}

TEST(QaFile, QuestionsWhoseAnswerIsInNoDocumentAreCountedWithAWarning) {
  ScratchDir dir;
  const auto path = dir.write_plain(
      "q.jsonl",
      std::string(R"({"question": "q0", "answers": ["red"], "ctxs": [{"title": "T0", "text": "the roof is red", "isgold": true}]})") +
          "\n" + R"({"question": "q1", "answers": ["blue"], "ctxs": [{"title": "T1", "text": "a red door", "isgold": true}]})" +
          "\n" + R"({"question": "q2", "answers": ["green", "teal"], "ctxs": [{"title": "T2", "text": "grey", "isgold": true}]})" +
          "\n");
  ::testing::internal::CaptureStderr();
  const QaFile file = read_qa_file(path);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(file.items.size(), 3u);
  EXPECT_EQ(file.answer_in_no_document, 2u);
  EXPECT_NE(warning.find(path), std::string::npos) << warning;
  EXPECT_NE(warning.find("2 of 3 questions"), std::string::npos) << warning;
  EXPECT_NE(warning.find("line 2"), std::string::npos) << warning;

  ::testing::internal::CaptureStderr();
  const QaFile clean = read_qa_file(fixture("nq-open-4_total_documents-fixture.jsonl.gz"));
  const std::string none = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(clean.answer_in_no_document, 0u) << none;
}

using BadQaCase = testing::BadRecordCase;

class QaBadRecord : public ::testing::TestWithParam<BadQaCase> {};

TEST_P(QaBadRecord, NamesFileLineAndField) {
  ScratchDir dir;
  const auto path = dir.write_gz("nq.jsonl.gz", GetParam().line + "\n");
  testing::expect_bad_record(GetParam(), path, 1u, [](const std::string& file) { read_qa_file(file); });
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QaBadRecord,
    ::testing::Values(
        BadQaCase{R"({"answers": ["x"], "ctxs": [{"title": "a", "text": "b", "isgold": true}]})", "question", "missing"},
        BadQaCase{R"({"question": "q", "answers": "x", "ctxs": [{"title": "a", "text": "b", "isgold": true}]})",
                  "answers", "expected an array"},
        BadQaCase{R"({"question": "q", "answers": [], "ctxs": [{"title": "a", "text": "b", "isgold": true}]})",
                  "answers", "empty"},
        BadQaCase{R"({"question": "q", "answers": ["x", 3], "ctxs": [{"title": "a", "text": "b", "isgold": true}]})",
                  "answers[1]", "expected a string"},
        BadQaCase{R"({"question": "q", "answers": ["x"], "ctxs": [{"text": "b", "isgold": true}]})", "ctxs[0].title",
                  "missing"},
        BadQaCase{R"({"question": "q", "answers": ["x"], "ctxs": [{"title": "a", "text": 4, "isgold": true}]})",
                  "ctxs[0].text", "expected a string"},
        BadQaCase{R"({"question": "q", "answers": ["x"], "ctxs": [{"title": "a", "text": "b", "isgold": "yes"}]})",
                  "ctxs[0].isgold", "true/false"},
        BadQaCase{R"({"question": "q", "answers": ["x"], "ctxs": [{"title": "a", "text": "b", "isgold": false}]})",
                  "ctxs", "exactly one"},
        BadQaCase{R"({"question": "q", "answers": ["x"], "ctxs": [{"title": "a", "text": "b", "isgold": true}, {"title": "c", "text": "d", "isgold": true}]})",
                  "ctxs", "found 2"},
        BadQaCase{R"({"question": "q", "answers": ["x"], "ctxs": [{"title": "a", "text": "b"}]})", "ctxs",
                  "no gold document"},
        BadQaCase{R"({"question": "q", "answers": ["x"], "ctxs": []})", "ctxs", "empty"}));

}  // namespace
}  // namespace midtune::datasets
