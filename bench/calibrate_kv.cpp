// KV retrieval calibration: the model's BASELINE accuracy by
// gold position at several pair counts and key lengths, so experiment files
// can pick a data size where the baseline is neither near 0 nor near 100 %
// and shows a position effect. Also measures how often teacher_forced
// ("gold emitted first") and generate (greedy + KV substring rule) agree on
// the same prompts, with and without an intervention.
//
// Prompts are built exactly as datasets::build_slice builds them (kv_prompt,
// the model's chat template, answer priming optional); keys/values can be
// cut to their first N characters to make the task easier or harder.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backends/engine/engine_backend.hpp"
#include "core/search/prompt_wrapper.hpp"
#include "datasets/hashing.hpp"
#include "datasets/kv_retrieval.hpp"
#include "datasets/prompts.hpp"
#include "datasets/scoring.hpp"
#include "datasets/slice.hpp"

namespace {

using namespace midtune;

struct Args {
  std::string model;
  std::vector<std::size_t> pairs = {10, 20, 30, 50};
  std::vector<std::size_t> key_chars = {0};  // 0 = the full UUID
  std::vector<double> positions = {0.0, 0.25, 0.5, 0.75, 1.0};
  std::size_t samples = 20;
  std::size_t generate_samples = 0;  // per position; 0 = teacher_forced only
  std::vector<double> pi_scales;     // extra interventions for the agreement run
  int max_new_tokens = 40;
  int threads = 0;
  bool prime = true;
  std::uint64_t seed = 77;
};

struct Sample {
  BatchItem item;
  std::string value;
  std::size_t position_index = 0;
};

datasets::KvItem cut(datasets::KvItem item, std::size_t chars) {
  if (chars == 0) return item;
  for (auto& [key, value] : item.records) {
    key = key.substr(0, chars);
    value = value.substr(0, chars);
  }
  item.key = item.key.substr(0, chars);
  item.value = item.value.substr(0, chars);
  return item;
}

std::vector<Sample> build(const Args& args, std::size_t pairs, std::size_t key_chars, std::size_t per_position,
                          const datasets::PromptWrapper& wrapper) {
  std::vector<Sample> samples;
  for (std::size_t p = 0; p < args.positions.size(); ++p) {
    for (std::size_t j = 0; j < per_position; ++j) {
      const std::uint64_t item_seed = datasets::derive_seed(args.seed, "calibrate", j);
      const datasets::KvItem base = cut(datasets::generate_kv_item(item_seed, pairs, "cal:" + std::to_string(j)),
                                        key_chars);
      const std::size_t gold = datasets::gold_chunk_index(args.positions[p], pairs);
      const datasets::KvItem placed = datasets::with_gold_at(base, gold);
      const auto prompt = datasets::kv_prompt(placed.records, placed.key);
      const auto answer = datasets::kv_answer_start(placed.key, placed.value, args.prime);
      samples.push_back({datasets::make_batch_item(prompt, wrapper, base.id + "#p" + std::to_string(p), answer,
                                                   static_cast<double>(gold) / static_cast<double>(pairs - 1)),
                         placed.value, p});
    }
  }
  return samples;
}

std::vector<BatchItem> items_of(const std::vector<Sample>& samples) {
  std::vector<BatchItem> items;
  for (const auto& s : samples) items.push_back(s.item);
  return items;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Baseline teacher_forced accuracy by position for one (pairs, key_chars).
void calibrate(engine::EngineBackend& backend, const Args& args, std::size_t pairs, std::size_t key_chars,
               const datasets::PromptWrapper& wrapper) {
  const auto samples = build(args, pairs, key_chars, args.samples, wrapper);
  const auto start = std::chrono::steady_clock::now();
  RunOptions options;
  options.mode = Mode::teacher_forced;
  const auto outputs = backend.run(Intervention{}, items_of(samples), options);
  std::vector<std::size_t> correct(args.positions.size(), 0);
  double logprob = 0.0;
  int tokens = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    correct[samples[i].position_index] += outputs[i].gold_emitted_first ? 1 : 0;
    logprob += outputs[i].gold_logprob;
    tokens += outputs[i].prompt_tokens;
  }
  std::printf("TF pairs=%zu key_chars=%zu tokens~%d n=%zu/pos |", pairs, key_chars,
              tokens / static_cast<int>(samples.size()), args.samples);
  for (std::size_t p = 0; p < correct.size(); ++p) {
    std::printf(" %.2f:%5.1f%%", args.positions[p], 100.0 * correct[p] / static_cast<double>(args.samples));
  }
  std::printf(" | mean logp %.2f | %.1f s\n", logprob / static_cast<double>(samples.size()), seconds_since(start));
  std::fflush(stdout);
}

// teacher_forced vs generate on the same prompts under one intervention.
void agreement(engine::EngineBackend& backend, const Args& args, std::size_t pairs, std::size_t key_chars,
               const Intervention& intervention, const std::string& label, const datasets::PromptWrapper& wrapper) {
  const auto samples = build(args, pairs, key_chars, args.generate_samples, wrapper);
  const auto start = std::chrono::steady_clock::now();
  RunOptions tf;
  tf.mode = Mode::teacher_forced;
  RunOptions gen;
  gen.mode = Mode::generate;
  gen.max_new_tokens = args.max_new_tokens;
  const auto tf_out = backend.run(intervention, items_of(samples), tf);
  const auto gen_out = backend.run(intervention, items_of(samples), gen);
  std::size_t agree = 0, tf_right = 0, gen_right = 0, both = 0;
  std::vector<std::size_t> gen_by_pos(args.positions.size(), 0), tf_by_pos(args.positions.size(), 0);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const bool t = tf_out[i].gold_emitted_first;
    const bool g = datasets::kv_correct(gen_out[i].output_text, samples[i].value);
    agree += t == g ? 1 : 0;
    tf_right += t ? 1 : 0;
    gen_right += g ? 1 : 0;
    both += t && g ? 1 : 0;
    gen_by_pos[samples[i].position_index] += g ? 1 : 0;
    tf_by_pos[samples[i].position_index] += t ? 1 : 0;
  }
  const double n = static_cast<double>(samples.size());
  std::printf("AGREE %s pairs=%zu key_chars=%zu n=%zu: agree %.1f%% | tf %.1f%% gen %.1f%% both %zu | by pos tf/gen:",
              label.c_str(), pairs, key_chars, samples.size(), 100.0 * agree / n, 100.0 * tf_right / n,
              100.0 * gen_right / n, both);
  for (std::size_t p = 0; p < args.positions.size(); ++p) {
    std::printf(" %zu/%zu", tf_by_pos[p], gen_by_pos[p]);
  }
  std::printf(" | %.1f s\n", seconds_since(start));
  if (!samples.empty()) std::printf("  e.g. gen output: %s\n", gen_out[0].output_text.substr(0, 120).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"KV retrieval baseline calibration and teacher_forced/generate agreement"};
  app.add_option("--model", args.model, "GGUF model")->required();
  app.add_option("--pairs", args.pairs, "pair counts");
  app.add_option("--key-chars", args.key_chars, "key/value length in characters (0 = full UUID)");
  app.add_option("--positions", args.positions, "gold position fractions");
  app.add_option("--samples", args.samples, "teacher_forced samples per position");
  app.add_option("--generate-samples", args.generate_samples,
                 "agreement run: samples per position (0 = skip), at the first pair count / key length");
  app.add_option("--pi-scale", args.pi_scales, "also measure agreement under PI at these scales");
  app.add_option("--max-new-tokens", args.max_new_tokens, "generate mode");
  app.add_option("--threads", args.threads, "engine threads (0 = all)");
  app.add_option("--seed", args.seed, "data seed");
  bool no_prime = false;
  bool skip_baseline = false;
  app.add_flag("--skip-baseline", skip_baseline, "agreement run: only the --pi-scale interventions");
  app.add_flag("--no-prime", no_prime, "do not prime the answer (the papers' exact protocol)");
  CLI11_PARSE(app, argc, argv);
  args.prime = !no_prime;
  try {
    engine::EngineOptions options;
    options.threads = args.threads;
    engine::EngineBackend backend(args.model, options);
    const datasets::PromptWrapper wrapper = prompt_wrapper(backend);
    if (args.generate_samples > 0) {
      if (!skip_baseline)
        agreement(backend, args, args.pairs.front(), args.key_chars.front(), Intervention{}, "baseline", wrapper);
      for (double scale : args.pi_scales) {
        Intervention pi;
        pi.rope_scale = {{scale}};
        agreement(backend, args, args.pairs.front(), args.key_chars.front(), pi, "pi=" + std::to_string(scale),
                  wrapper);
      }
      return 0;
    }
    for (std::size_t key_chars : args.key_chars) {
      for (std::size_t pairs : args.pairs) calibrate(backend, args, pairs, key_chars, wrapper);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "calibrate_kv: %s\n", error.what());
    return 1;
  }
  return 0;
}
