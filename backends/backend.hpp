// The Backend interface (docs/design.md "Data flow"): runs a model under an
// Intervention on a batch of prompts and returns, per sample, what the
// metric needs. Backends never see a genome.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/batch_item.hpp"
#include "methods/intervention.hpp"

namespace midtune {

enum class Mode { generate, teacher_forced };

struct RunOptions {
  Mode mode = Mode::generate;
  int max_new_tokens = 100;
};

struct SampleOutput {
  std::string id;
  std::string output_text;          // generate mode: greedy continuation
  bool gold_emitted_first = false;  // teacher_forced: argmax == gold at every answer token
  double gold_logprob = 0.0;        // teacher_forced: sum of log p(gold token)
  int prompt_tokens = 0;
  double wall_ms = 0.0;
};

// What a backend says about the model it runs; part of every cache key.
struct ModelIdentity {
  std::string name;
  std::string architecture;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int hidden = 0;
  std::string tokenizer_hash;
  // "xxh3-128:<hex>" of the model file's bytes (its weights), so that two
  // files sharing a name and shapes (two quantisations, an edited copy) never
  // share results; empty for a backend that cannot tell (the synthetic test
  // double, a server of an older midtune).
  std::string content_hash;
  // How the backend computes, where it differs from the CPU engine's default
  // (empty): "bf16" for the batched GPU engine's bf16 products.
  std::string precision;
  nlohmann::json to_json() const;
  // The part that decides results (used in cache keys).
  std::string key() const;
  // What validating an Intervention against this model needs.
  // (RoPE assumed: a served model without it refuses such a method when it
  // evaluates, as the engine does at validate.)
  ModelShape shape() const {
    return {.layers = layers, .heads = heads, .kv_heads = kv_heads, .hidden = hidden, .rope = true,
            .architecture = architecture};
  }
};

// A user message in the model's chat template; the message starts at
// content_begin of text, and the answer starts the assistant turn.
struct WrappedUserMessage {
  std::string text;
  std::size_t content_begin = 0;
};

// How the model wants one user message wrapped (its chat template).
struct ChatWrapper {
  // "chat-template:<tokenizer hash>": the same for the engine and a server of
  // the same model, so both build the same slice identities and cache keys.
  std::string name;
  std::function<WrappedUserMessage(const std::string& message)> wrap;
};

// One of several independent runs handed to Backend::run_each.
struct RunJob {
  const Intervention* intervention = nullptr;  // outlives the run_each call
  // Shared, not copied: every whole-split job of a generation runs the same
  // items, which may be hundreds of long prompts.
  std::shared_ptr<const std::vector<BatchItem>> batch;
  // Work that may be wanted later (racing's next step for a candidate that
  // may survive the look): run only by workers that would otherwise wait.
  // See run_each().
  bool speculative = false;
};

// What became of one RunJob: its outputs (one per batch item, in order), or
// the exception it ended with (BackendError, InvalidInputError,
// std::invalid_argument, RunStopped).
struct RunJobResult {
  std::vector<SampleOutput> outputs;
  std::exception_ptr error;
  // What the job cost the backend: its wall time, or, on several workers,
  // the time each spent on its parts, added up.
  double seconds = 0.0;
};
using RunJobDone = std::function<void(std::size_t job, RunJobResult result)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual ModelIdentity identity() const = 0;
  // Throws midtune::BackendError when the evaluation cannot be completed;
  // a failure is never turned into a score.
  virtual std::vector<SampleOutput> run(const Intervention& intervention,
                                        const std::vector<BatchItem>& batch,
                                        const RunOptions& options) = 0;
  // Checks an Intervention against this model (layer/head/channel ranges);
  // throws std::invalid_argument with the reason.
  virtual void validate(const Intervention& intervention) const = 0;
  // Runs independent jobs and hands each one's result to `done`, in job
  // order, as soon as it and every job before it have finished: a backend
  // with several workers (MPI evaluator ranks) computes later jobs while
  // `done` stores earlier ones, and a stored prefix never depends on how
  // many workers there were. `done` is called for a prefix of the jobs; a
  // result with an error (the job failed, or the run stopped) is the last
  // one. Once `stop` is non-zero no new job starts, and the first job not
  // run comes back as RunStopped. If `done` throws, run_each rethrows once
  // nothing is in flight. The default runs the jobs one after another with
  // run().
  //
  // Speculative jobs (RunJob::speculative) come after every other job in
  // `jobs` and are never handed to `done`: they say what a later call will
  // likely ask for. A backend with several workers gives their parts to
  // workers that have nothing else to do, may return with some still being
  // computed, and keeps their results: a later call's job part with the
  // same intervention, options and items takes the kept result (or waits for
  // it) instead of computing it again, so the results handed over are the
  // same with or without speculation. A later call that neither asks for a
  // kept part nor lists it as speculative again throws it away; a
  // speculative part that fails is thrown away and never fails the run. The
  // default (one process: nothing would be idle) skips them.
  virtual void run_each(const std::vector<RunJob>& jobs, const RunOptions& options, const RunJobDone& done,
                        const std::atomic<int>* stop = nullptr);
  // How the workers of a backend with several are doing (per worker: where
  // it runs, units done, time busy and waiting), for `ga-run status`; null
  // for a backend that computes in this process.
  virtual nlohmann::json workers() const { return nullptr; }
  // The model's chat template; nullopt: prompts are sent as written.
  virtual std::optional<ChatWrapper> chat_wrapper() const { return std::nullopt; }
  // How this backend computes, recorded with every run: "device", and where
  // known "kernel_path" (the CPU engine's instruction-set family), "threads",
  // "precision". Results of one seed are bit-identical on one kernel path;
  // across paths near-tie decisions may differ.
  virtual nlohmann::json execution() const { return nlohmann::json::object(); }
};

// ChatWrapper::name for a model.
inline std::string chat_template_name(const ModelIdentity& model) { return "chat-template:" + model.tokenizer_hash; }

struct BackendError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The request itself cannot be evaluated (a prompt longer than the model's
// context, values that overflow the model's arithmetic): a retry, here or on
// another server, would fail the same way.
struct InvalidInputError : BackendError {
  using BackendError::BackendError;
};
// A run given up because the process was asked to stop (SIGTERM, SIGINT,
// SIGUSR1): not a failure of the backend, so nothing is recorded for it;
// the same command evaluates it again.
struct RunStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* to_string(Mode mode);
Mode mode_from_string(const std::string& text);  // throws std::invalid_argument

}  // namespace midtune
