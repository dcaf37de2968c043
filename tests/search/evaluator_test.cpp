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
    if (runs == fail_at_run) throw BackendError("stopped at run " + std::to_string(runs));
    items_run += static_cast<int>(b.size());
    auto out = SyntheticTestDoubleBackend::run(iv, b, o);
    if (drop_one) out.pop_back();
    return out;
  }
  int runs = 0;
  int items_run = 0;
  bool drop_one = false;
  int fail_at_run = 0;  // this run throws, as a killed process stops mid-evaluation
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
  EvaluationInputs in = inputs(backend);
  in.stored_slice_items = 0;  // one run of the whole split
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

// A long evaluation (`ga-run eval`, the held-out step) stores its samples a
// slice at a time: stopped part-way, it keeps the slices it finished, and the
// next evaluation of the same key runs only the rest, ending with the row an
// uninterrupted evaluation stores.
TEST_F(EvaluatorTest, AStoppedEvaluationKeepsItsSlicesAndTheNextCompletesIt) {
  CountingBackend whole_backend;
  EvaluationInputs whole = inputs(whole_backend);
  whole.stored_slice_items = 0;
  Store uninterrupted(path("whole.db"));
  const SplitEvaluation reference = Evaluator(whole).evaluate(uninterrupted, scaled(1.2));
  ASSERT_EQ(whole_backend.runs, 1);

  CountingBackend stopped_backend;
  stopped_backend.fail_at_run = 2;
  EvaluationInputs in = inputs(stopped_backend);
  in.stored_slice_items = 8;  // 30 items: slices of 8, 8, 8 and 6
  Store store(path("r.db"));
  EXPECT_THROW(Evaluator(in).evaluate(store, scaled(1.2)), BackendError);
  const std::string key = Evaluator(in).cache_key(scaled(1.2));
  EXPECT_FALSE(store.find_evaluation(key)) << "an incomplete row is never a cached result";
  const auto partial = store.find_partial_evaluation(key);
  ASSERT_TRUE(partial) << "the first slice is kept";
  EXPECT_EQ(store.evaluation_samples(partial->id).size(), 8u);

  CountingBackend next_backend;
  EvaluationInputs next = inputs(next_backend);
  next.stored_slice_items = 8;
  const SplitEvaluation resumed = Evaluator(next).evaluate(store, scaled(1.2));
  EXPECT_FALSE(resumed.cache_hit);
  EXPECT_EQ(resumed.resumed_samples, 8u);
  EXPECT_EQ(next_backend.items_run, 22) << "only the items not stored ran";
  EXPECT_EQ(next_backend.runs, 3);
  EXPECT_EQ(resumed.evaluation_id, partial->id);
  EXPECT_EQ(resumed.scores, reference.scores);
  EXPECT_EQ(resumed.summary, reference.summary);
  const auto stored = store.evaluation_samples(resumed.evaluation_id);
  const auto expected = uninterrupted.evaluation_samples(reference.evaluation_id);
  ASSERT_EQ(stored.size(), expected.size());
  for (std::size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].sample_id, expected[i].sample_id);
    EXPECT_EQ(stored[i].correct, expected[i].correct);
    EXPECT_EQ(stored[i].gold_logprob, expected[i].gold_logprob);
  }
  ASSERT_TRUE(store.find_evaluation(key)) << "complete now, so served from the cache";
  const SplitEvaluation cached = Evaluator(next).evaluate(store, scaled(1.2));
  EXPECT_TRUE(cached.cache_hit);
  EXPECT_EQ(next_backend.runs, 3);
}

// evaluate_all hands small evaluations to the backend together and leaves
// one larger than a slice to run in stored slices in its turn.
TEST_F(EvaluatorTest, EvaluateAllRunsALargeSplitInSlices) {
  CountingBackend backend;
  EvaluationInputs in = inputs(backend);
  in.stored_slice_items = 8;
  Store store(path("r.db"));
  std::vector<SplitEvaluation> results(2);
  Evaluator(in).evaluate_all(store, {scaled(1.1), scaled(1.2)},
                             [&](std::size_t i, SplitEvaluation e) { results[i] = std::move(e); });
  EXPECT_EQ(backend.runs, 8) << "two evaluations of four slices each";
  EXPECT_EQ(backend.items_run, 60);
  for (const SplitEvaluation& e : results) {
    EXPECT_FALSE(e.cache_hit);
    EXPECT_TRUE(store.evaluation(e.evaluation_id));
  }
  EXPECT_TRUE(store.find_evaluation(Evaluator(in).cache_key(scaled(1.1))));
  EXPECT_TRUE(store.find_evaluation(Evaluator(in).cache_key(scaled(1.2))));
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

// One process has no evaluator that would be idle: the default run_each
// runs the other jobs, hands each over in order, and skips the speculative
// ones (no run, no result).
TEST_F(EvaluatorTest, TheDefaultRunEachSkipsSpeculativeJobs) {
  CountingBackend backend;
  const EvaluationInputs in = inputs(backend);
  const Evaluator evaluator(in);
  const Intervention one = scaled(1.1), two = scaled(1.2);
  RunPlan plan;
  ASSERT_TRUE(evaluator.plan_run(plan, 0, one, "k1", {0, 1, 2}));
  ASSERT_TRUE(evaluator.plan_run(plan, 1, two, "k2", {3, 4}));
  ASSERT_TRUE(evaluator.plan_run(plan, 0, one, "k1", {5, 6}, true)) << "speculative keys are apart from the others";
  ASSERT_TRUE(evaluator.plan_run(plan, 1, two, "k2", {7}, true));
  ASSERT_TRUE(evaluator.plan_run(plan, 1, two, "k2", {8}, true)) << "a key's second speculative run is not planned";
  ASSERT_EQ(plan.jobs.size(), 4u);
  EXPECT_FALSE(plan.jobs[1].speculative);
  EXPECT_TRUE(plan.jobs[2].speculative);
  EXPECT_THROW(evaluator.plan_run(plan, 2, scaled(1.3), "k3", {9}), std::logic_error)
      << "speculative runs come after all others";

  std::vector<std::pair<std::size_t, std::size_t>> handled;  // work, outputs of its run
  run_in_order(backend, in.run_options, plan, 3, [&](std::size_t w, const PrefetchedRun* ahead) {
    handled.emplace_back(w, ahead == nullptr ? 0 : ahead->result.outputs.size());
  });
  EXPECT_EQ(handled, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 3}, {1, 2}, {2, 0}}));
  EXPECT_EQ(backend.runs, 2) << "no speculative job ran";

  // Directly: only the non-speculative jobs are handed to `done`, in order.
  std::vector<std::size_t> done;
  backend.run_each(plan.jobs, in.run_options, [&](std::size_t job, RunJobResult r) {
    EXPECT_FALSE(r.error);
    done.push_back(job);
  });
  EXPECT_EQ(done, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(backend.runs, 4);
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
