// The Evaluator shared by the search, the held-out step and `ga-run eval`,
// and the backend's chat template as a prompt wrapper, on the synthetic
// test double and a real SQLite file.
#include "core/search/evaluator.hpp"

#include <gtest/gtest.h>

#include "backends/synthetic/synthetic_test_double.hpp"
#include "core/search/prompt_wrapper.hpp"
#include "objectives/metrics.hpp"
#include "tests/cli/temp_dir.hpp"

namespace midtune {
namespace {

class CountingBackend : public SyntheticTestDoubleBackend {
 public:
  CountingBackend() : SyntheticTestDoubleBackend({.layers = 4, .heads = 2, .seed = 5}) {}
  std::vector<SampleOutput> run(const Intervention& iv, const std::vector<BatchItem>& b, const RunOptions& o) override {
    ++runs;
    auto out = SyntheticTestDoubleBackend::run(iv, b, o);
    if (drop_one) out.pop_back();
    return out;
  }
  int runs = 0;
  bool drop_one = false;
};

// A backend with a chat template, as the engine and a server have.
class TemplatedBackend : public CountingBackend {
 public:
  std::optional<ChatWrapper> chat_wrapper() const override {
    return ChatWrapper{chat_template_name(identity()), [](const std::string& message) {
                         return WrappedUserMessage{"<user>" + message + "</user>", 6};
                       }};
  }
};

class EvaluatorTest : public testing::TempDirTest {
 protected:
  EvaluationInputs inputs(Backend& backend) {
    EvaluationInputs in;
    in.backend = &backend;
    in.gold_positions = {0.0, 0.5, 1.0};
    for (std::size_t k = 0; k < in.gold_positions.size(); ++k)
      for (int i = 0; i < 10; ++i) {
        in.items.push_back({std::to_string(k) + "-" + std::to_string(i), "prompt", {}, "gold", in.gold_positions[k]});
        in.position_index.push_back(k);
      }
    in.dataset_slice = {{"fixture", "s"}};
    in.metric = "teacher_forced";
    in.run_options.mode = Mode::teacher_forced;
    in.score = [](std::size_t, const SampleOutput& o) { return o.gold_emitted_first; };
    return in;
  }
  static Intervention scaled(double scale) {
    Intervention iv;
    iv.rope_scale = {{scale}};
    return iv;
  }
};

TEST_F(EvaluatorTest, RunScoresTalliesAndSummarisesEverySample) {
  CountingBackend backend;
  const EvaluationInputs in = inputs(backend);
  const Evaluator evaluator(in);
  const std::string key = evaluator.cache_key(scaled(1.5));
  EXPECT_EQ(key, evaluation_cache_key(scaled(1.5), in.dataset_slice, in.metric, backend.identity()));
  const NewEvaluation fresh = evaluator.run(scaled(1.5), key);
  ASSERT_EQ(fresh.samples.size(), 30u);
  ASSERT_EQ(fresh.record.position_scores.size(), 3u);
  int correct = 0;
  for (const SampleRecord& s : fresh.samples) {
    correct += s.correct;
    EXPECT_TRUE(s.gold_logprob) << "teacher_forced keeps the gold log-probability";
  }
  int tallied = 0;
  for (const PositionScore& p : fresh.record.position_scores) {
    EXPECT_EQ(p.samples, 10);
    EXPECT_DOUBLE_EQ(p.accuracy, p.correct / 10.0);
    tallied += p.correct;
  }
  EXPECT_EQ(tallied, correct);
  // The summary stored with a fresh evaluation is the one the held-out step
  // and reports compute from stored scores.
  EXPECT_EQ(fresh.record.fitness_inputs, position_summary_json(fresh.record.position_scores));
  EXPECT_TRUE(fresh.record.fitness_inputs.contains("u_shape_pearson"));
  EXPECT_EQ(fresh.record.cache_key, key);
  EXPECT_EQ(fresh.record.model, backend.identity().key());
}

TEST_F(EvaluatorTest, EvaluateStoresOnceThenServesTheCache) {
  CountingBackend backend;
  const EvaluationInputs in = inputs(backend);
  Store store(path("r.db"));
  const Evaluator evaluator(in);
  const SplitEvaluation first = evaluator.evaluate(store, scaled(1.2));
  EXPECT_FALSE(first.cache_hit);
  EXPECT_EQ(backend.runs, 1);
  const SplitEvaluation again = evaluator.evaluate(store, scaled(1.2));
  EXPECT_TRUE(again.cache_hit);
  EXPECT_EQ(backend.runs, 1);
  EXPECT_EQ(again.evaluation_id, first.evaluation_id);
  EXPECT_EQ(again.scores, first.scores);
  EXPECT_EQ(again.summary, first.summary);
  evaluate_on_split(store, in, scaled(1.3));
  EXPECT_EQ(backend.runs, 2) << "another intervention is another key";
}

TEST_F(EvaluatorTest, AShortAnswerFromTheBackendIsABackendError) {
  CountingBackend backend;
  backend.drop_one = true;
  const EvaluationInputs in = inputs(backend);
  Store store(path("r.db"));
  EXPECT_THROW(Evaluator(in).evaluate(store, scaled(1.2)), BackendError);
  EXPECT_FALSE(store.find_evaluation(Evaluator(in).cache_key(scaled(1.2)))) << "no score from a failed run";
}

TEST_F(EvaluatorTest, AnInterventionTheModelRefusesIsNotRun) {
  CountingBackend backend;
  const EvaluationInputs in = inputs(backend);
  Intervention too_deep;
  too_deep.rope_scale = {{1.0}, {1.0}, {1.0}, {1.0}, {1.0}, {1.0}};  // 6 layers on a 4-layer model
  EXPECT_THROW(Evaluator(in).run(too_deep, "k"), std::invalid_argument);
  EXPECT_EQ(backend.runs, 0);
}

TEST_F(EvaluatorTest, PromptWrapperIsTheBackendsChatTemplate) {
  CountingBackend plain;
  EXPECT_EQ(prompt_wrapper(plain).name, datasets::PromptWrapper::identity().name);
  TemplatedBackend templated;
  const datasets::PromptWrapper wrapper = prompt_wrapper(templated);
  EXPECT_EQ(wrapper.name, "chat-template:" + templated.identity().tokenizer_hash);
  const datasets::WrappedPrompt wrapped = wrapper.render("hello");
  EXPECT_EQ(wrapped.text, "<user>hello</user>");
  EXPECT_EQ(wrapped.user_offset, 6u);
  EXPECT_EQ(wrapper.answer_lead, "");
}

}  // namespace
}  // namespace midtune
