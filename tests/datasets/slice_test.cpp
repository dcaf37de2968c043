#include "datasets/slice.hpp"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "datasets/dataset_error.hpp"
#include "test_files.hpp"

namespace midtune::datasets {
namespace {

using testing::expect_dataset_error;
using testing::fixture;

std::set<std::string> base_ids(const Slice& slice) {
  std::set<std::string> ids;
  for (const auto& sample : slice.samples) ids.insert(sample.base_id);
  return ids;
}

SliceSpec file_spec(TaskKind kind, const std::string& name, std::size_t chunks, std::size_t search,
                    std::size_t heldout) {
  SliceSpec spec;
  spec.kind = kind;
  spec.file = fixture(name);
  spec.chunks = chunks;
  spec.search_samples = search;
  spec.heldout_samples = heldout;
  return spec;
}

SliceSpec generated_kv() {
  SliceSpec spec;
  spec.chunks = 9;
  spec.gold_positions = {0.0, 0.5, 1.0};
  spec.search_samples = 4;
  spec.heldout_samples = 5;
  spec.seed = 1234;
  return spec;
}

TEST(GoldChunkIndex, RoundsFractionOfLastIndex) {
  EXPECT_EQ(gold_chunk_index(0.0, 50), 0u);
  EXPECT_EQ(gold_chunk_index(1.0, 50), 49u);
  EXPECT_EQ(gold_chunk_index(0.5, 50), 25u);  // 24.5 rounds away from zero
  EXPECT_EQ(gold_chunk_index(0.2, 50), 10u);  // 9.8
  EXPECT_EQ(gold_chunk_index(0.75, 20), 14u); // 14.25
  EXPECT_EQ(gold_chunk_index(0.3, 1), 0u);
  EXPECT_THROW(gold_chunk_index(1.5, 10), std::invalid_argument);
  EXPECT_THROW(gold_chunk_index(0.5, 0), std::invalid_argument);
}

TEST(Slice, GeneratedKvLayoutAndGold) {
  const auto slice = build_slice(generated_kv(), Split::search, PromptWrapper::identity());
  ASSERT_EQ(slice.samples.size(), 12u);
  EXPECT_EQ(base_ids(slice).size(), 4u);
  const std::size_t expected_gold[] = {0, 4, 8};
  for (std::size_t i = 0; i < slice.samples.size(); ++i) {
    const auto& sample = slice.samples[i];
    EXPECT_EQ(sample.position_index, i / 4);
    EXPECT_EQ(sample.gold_chunk, expected_gold[i / 4]);
    EXPECT_DOUBLE_EQ(sample.item.gold_depth, static_cast<double>(sample.gold_chunk) / 8.0);
    ASSERT_EQ(sample.item.chunks.size(), 9u);
    const auto& span = sample.item.chunks[sample.gold_chunk];
    const std::string gold_chunk = sample.item.prompt_text.substr(span.begin, span.end - span.begin);
    EXPECT_NE(gold_chunk.find(sample.answers.front()), std::string::npos);
    EXPECT_EQ(sample.item.gold, " " + sample.answers.front());
    EXPECT_TRUE(is_correct(sample, "the value is " + sample.answers.front()));
    EXPECT_FALSE(is_correct(sample, "no idea"));
  }
  // The same base item at every position: identical except for the moved pair.
  EXPECT_EQ(slice.samples[0].base_id, slice.samples[4].base_id);
  EXPECT_EQ(slice.samples[0].answers, slice.samples[8].answers);
}

TEST(Slice, PrimedKvAnswers) {
  auto spec = generated_kv();
  spec.prime_answer = true;
  const auto primed = build_slice(spec, Split::search, PromptWrapper::affixes("chat", "<u>", "</u><a>"));
  const auto plain = build_slice(generated_kv(), Split::search, PromptWrapper::affixes("chat", "<u>", "</u><a>"));
  ASSERT_EQ(primed.samples.size(), plain.samples.size());
  for (std::size_t i = 0; i < primed.samples.size(); ++i) {
    const auto& item = primed.samples[i].item;
    EXPECT_EQ(item.prompt_text.substr(0, plain.samples[i].item.prompt_text.size()), plain.samples[i].item.prompt_text);
    EXPECT_TRUE(item.prompt_text.ends_with(" is \"")) << item.prompt_text;
    EXPECT_EQ(item.gold, primed.samples[i].answers.front());
    EXPECT_EQ(item.chunks, plain.samples[i].item.chunks);
    // A primed continuation is the value itself.
    EXPECT_TRUE(is_correct(primed.samples[i], item.gold + "\"."));
  }
  EXPECT_NE(primed.identity, plain.identity);
}

TEST(Slice, GeneratedSplitsAreDisjointAndDeterministic) {
  const auto spec = generated_kv();
  const auto search = build_slice(spec, Split::search, PromptWrapper::identity());
  const auto heldout = build_slice(spec, Split::heldout, PromptWrapper::identity());
  EXPECT_EQ(heldout.samples.size(), 15u);
  std::set<std::string> search_values;
  for (const auto& sample : search.samples) search_values.insert(sample.answers.front());
  for (const auto& sample : heldout.samples) {
    EXPECT_FALSE(base_ids(search).contains(sample.base_id));
    EXPECT_FALSE(search_values.contains(sample.answers.front()));
  }
  const auto again = build_slice(spec, Split::search, PromptWrapper::identity());
  ASSERT_EQ(again.samples.size(), search.samples.size());
  for (std::size_t i = 0; i < search.samples.size(); ++i) {
    EXPECT_EQ(again.samples[i].item.prompt_text, search.samples[i].item.prompt_text);
  }
  EXPECT_EQ(again.identity, search.identity);
  EXPECT_NE(search.identity, heldout.identity);
}

TEST(Slice, IdentityFollowsEveryInput) {
  const auto base = build_slice(generated_kv(), Split::search, PromptWrapper::identity()).identity;
  auto seed = generated_kv();
  seed.seed = 99;
  auto positions = generated_kv();
  positions.gold_positions = {0.0, 1.0};
  auto pairs = generated_kv();
  pairs.chunks = 10;
  for (const auto& spec : {seed, positions, pairs}) {
    EXPECT_NE(build_slice(spec, Split::search, PromptWrapper::identity()).identity, base);
  }
  EXPECT_NE(build_slice(generated_kv(), Split::search, PromptWrapper::affixes("chat", "<u>", "</u>")).identity, base);
  EXPECT_NE(base.find("split=search"), std::string::npos);
}

TEST(Slice, FileSplitsDisjointAndHeldoutStable) {
  SliceSpec spec = file_spec(TaskKind::kv, "kv-retrieval-6_keys-fixture.jsonl.gz", 0, 4, 5);
  spec.gold_positions = {0.0, 0.5, 1.0};
  spec.seed = 7;
  const auto search = build_slice(spec, Split::search, PromptWrapper::identity());
  const auto heldout = build_slice(spec, Split::heldout, PromptWrapper::identity());
  EXPECT_EQ(base_ids(search).size(), 4u);
  EXPECT_EQ(base_ids(heldout).size(), 5u);
  for (const auto& id : base_ids(heldout)) EXPECT_FALSE(base_ids(search).contains(id)) << id;
  // Growing the search split does not change the held-out split.
  spec.search_samples = 5;
  EXPECT_EQ(base_ids(build_slice(spec, Split::heldout, PromptWrapper::identity())), base_ids(heldout));
  // A different seed gives a different split.
  spec.seed = 8;
  spec.search_samples = 4;
  EXPECT_NE(base_ids(build_slice(spec, Split::search, PromptWrapper::identity())), base_ids(search));
  EXPECT_NE(search.identity.find("kv-retrieval-6_keys-fixture.jsonl.gz#"), std::string::npos);
}

TEST(Slice, DisjointForManySeeds) {
  SliceSpec spec = file_spec(TaskKind::mdqa, "nq-open-4_total_documents-fixture.jsonl.gz", 0, 5, 7);
  // all 12 items
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    spec.seed = seed;
    const auto search = base_ids(build_slice(spec, Split::search, PromptWrapper::identity()));
    const auto heldout = base_ids(build_slice(spec, Split::heldout, PromptWrapper::identity()));
    ASSERT_EQ(search.size() + heldout.size(), 12u);
    for (const auto& id : heldout) ASSERT_FALSE(search.contains(id));
  }
}

TEST(Slice, TooFewItemsIsADatasetError) {
  SliceSpec spec = file_spec(TaskKind::kv, "kv-retrieval-6_keys-fixture.jsonl.gz", 0, 6, 5);

  const auto error = expect_dataset_error([&] { build_slice(spec, Split::search, PromptWrapper::identity()); });
  EXPECT_NE(error.reason().find("the file has 10"), std::string::npos) << error.what();
}

TEST(Slice, KvSubsampleFromFile) {
  SliceSpec spec = file_spec(TaskKind::kv, "kv-retrieval-6_keys-fixture.jsonl.gz", 4, 2, 2);

  const auto slice = build_slice(spec, Split::search, PromptWrapper::identity());
  for (const auto& sample : slice.samples) EXPECT_EQ(sample.item.chunks.size(), 4u);
  spec.chunks = 7;
  expect_dataset_error([&] { build_slice(spec, Split::search, PromptWrapper::identity()); });
}

TEST(Slice, MdqaFromFileMovesGold) {
  SliceSpec spec = file_spec(TaskKind::mdqa, "nq-open-4_total_documents-fixture.jsonl.gz", 0, 3, 3);
  spec.gold_positions = {0.0, 1.0 / 3.0, 1.0};

  const auto slice = build_slice(spec, Split::heldout, PromptWrapper::identity());
  ASSERT_EQ(slice.samples.size(), 9u);
  for (const auto& sample : slice.samples) {
    const std::size_t expected[] = {0, 1, 3};
    EXPECT_EQ(sample.gold_chunk, expected[sample.position_index]);
    const auto& span = sample.item.chunks[sample.gold_chunk];
    const auto line = sample.item.prompt_text.substr(span.begin, span.end - span.begin);
    EXPECT_TRUE(line.starts_with("Document [" + std::to_string(sample.gold_chunk + 1) + "]")) << line;
    EXPECT_TRUE(is_correct(sample, sample.answers.front() + "\nextra"));
    EXPECT_FALSE(is_correct(sample, "unknown\n" + sample.answers.front()));
  }
}

TEST(Slice, OracleFileNeedsOtherQuestionDistractors) {
  SliceSpec spec = file_spec(TaskKind::mdqa, "nq-open-oracle-fixture.jsonl.gz", 5, 2, 2);

  const auto error = expect_dataset_error([&] { build_slice(spec, Split::search, PromptWrapper::identity()); });
  EXPECT_NE(error.reason().find("other questions"), std::string::npos) << error.what();
  spec.distractors = DistractorSource::other_questions;
  const auto slice = build_slice(spec, Split::search, PromptWrapper::identity());
  ASSERT_EQ(slice.samples.size(), 6u);
  EXPECT_EQ(slice.samples.back().gold_chunk, 4u);
  EXPECT_EQ(slice.samples.back().item.chunks.size(), 5u);
  EXPECT_NE(slice.identity.find("distractors=other-questions"), std::string::npos);
}

TEST(Slice, BabilongBucketsByMeasuredDepth) {
  SliceSpec spec = file_spec(TaskKind::babilong, "babilong-qa2-fixture.jsonl", 0, 1, 2);
  spec.gold_positions = {0.0, 0.5, 1.0};
  const auto slice = build_slice(spec, Split::heldout, PromptWrapper::identity());
  ASSERT_EQ(slice.samples.size(), 6u);  // 2 per position
  const auto search = build_slice(spec, Split::search, PromptWrapper::identity());
  ASSERT_EQ(search.samples.size(), 3u);
  for (const auto& id : base_ids(search)) EXPECT_FALSE(base_ids(slice).contains(id));
  // The fixture has 4 items per bucket.
  spec.heldout_samples = 4;
  const auto error = expect_dataset_error([&] { build_slice(spec, Split::search, PromptWrapper::identity()); });
  EXPECT_NE(error.reason().find("nearest position"), std::string::npos) << error.what();
  std::size_t previous = 0;
  for (const auto& sample : slice.samples) {
    EXPECT_GE(sample.position_index, previous);
    previous = sample.position_index;
    const double nearest = spec.gold_positions[sample.position_index];
    for (double other : spec.gold_positions) {
      EXPECT_LE(std::abs(nearest - sample.item.gold_depth), std::abs(other - sample.item.gold_depth) + 1e-12);
    }
    EXPECT_TRUE(is_correct(sample, "The item is in the " + sample.answers.front() + "."));
    EXPECT_TRUE(sample.item.gold.starts_with(" The ")) << sample.item.gold;
    EXPECT_TRUE(is_correct(sample, sample.item.gold));
  }
}

// A verdict on the middle needs many held-out items there and fewer at the
// ends: each position takes a prefix of the same base items, so the items
// at the ends are also in the middle, and the split stays disjoint from search.
TEST(Slice, HeldoutCountsPerPositionTakeAPrefixOfTheSameItems) {
  SliceSpec spec = generated_kv();
  const auto uniform = build_slice(spec, Split::heldout, PromptWrapper::identity());
  spec.heldout_per_position = {2, 5, 3};
  const auto uneven = build_slice(spec, Split::heldout, PromptWrapper::identity());
  ASSERT_EQ(uneven.samples.size(), 10u);
  std::vector<std::vector<std::string>> ids(3);
  for (const auto& sample : uneven.samples) ids[sample.position_index].push_back(sample.item.id);
  std::vector<std::vector<std::string>> uniform_ids(3);
  for (const auto& sample : uniform.samples) uniform_ids[sample.position_index].push_back(sample.item.id);
  for (std::size_t p = 0; p < 3; ++p) {
    ASSERT_EQ(ids[p].size(), spec.heldout_per_position[p]);
    EXPECT_TRUE(std::equal(ids[p].begin(), ids[p].end(), uniform_ids[p].begin())) << "position " << p;
  }
  EXPECT_NE(uneven.identity, uniform.identity);
  EXPECT_NE(uneven.identity.find("samples=2/5/3"), std::string::npos) << uneven.identity;
  // The search split ignores the held-out counts.
  EXPECT_EQ(build_slice(spec, Split::search, PromptWrapper::identity()).identity,
            build_slice(generated_kv(), Split::search, PromptWrapper::identity()).identity);

  // From a file: the held-out split is the first max(counts) items, as with
  // one count, and the search split follows them.
  SliceSpec file = file_spec(TaskKind::kv, "kv-retrieval-6_keys-fixture.jsonl.gz", 0, 4, 5);
  file.gold_positions = {0.0, 0.5, 1.0};
  file.seed = 7;
  const auto search = base_ids(build_slice(file, Split::search, PromptWrapper::identity()));
  const auto heldout = base_ids(build_slice(file, Split::heldout, PromptWrapper::identity()));
  file.heldout_per_position = {1, 5, 2};
  const auto per_position = build_slice(file, Split::heldout, PromptWrapper::identity());
  EXPECT_EQ(per_position.samples.size(), 8u);
  EXPECT_EQ(base_ids(per_position), heldout);
  EXPECT_EQ(base_ids(build_slice(file, Split::search, PromptWrapper::identity())), search);

  // One count per position, the largest equal to heldout_samples.
  spec.heldout_per_position = {2, 5};
  EXPECT_THROW(spec.validate(), std::invalid_argument);
  spec.heldout_per_position = {2, 4, 3};
  EXPECT_THROW(spec.validate(), std::invalid_argument);
}

TEST(SliceSpec, ValidationMessages) {
  SliceSpec spec = generated_kv();
  spec.gold_positions = {0.0, 1.2};
  EXPECT_THROW(spec.validate(), std::invalid_argument);
  spec = generated_kv();
  spec.kind = TaskKind::mdqa;
  EXPECT_THROW(spec.validate(), std::invalid_argument);  // mdqa needs a file
  spec = generated_kv();
  spec.chunks = 1;
  EXPECT_THROW(spec.validate(), std::invalid_argument);
  spec = generated_kv();
  spec.distractors = DistractorSource::other_questions;
  EXPECT_THROW(spec.validate(), std::invalid_argument);
  EXPECT_EQ(task_kind_from_string("babilong"), TaskKind::babilong);
  EXPECT_EQ(split_from_string("heldout"), Split::heldout);
  EXPECT_EQ(distractor_source_from_string("other-questions"), DistractorSource::other_questions);
  EXPECT_THROW(task_kind_from_string("nq"), std::invalid_argument);
}

}  // namespace
}  // namespace midtune::datasets
