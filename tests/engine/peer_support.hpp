// What the peer tests share (ctest label `peer`; engine_peer_test.cpp,
// real_model_peer_test.cpp): where scripts/fetch_peers.sh put the peers
// (MIDTUNE_PEERS_DIR, else the cache folder it prints), skipping or failing
// when one is missing, the numpy reference's logits, and the engine's greedy
// text against llama.cpp's llama-simple with its partings judged by the
// reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <stdlib.h>

#include "backends/engine/gguf/tokenizer.hpp"
#include "backends/engine/model.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/test_paths.hpp"

namespace midtune::engine::peer {

namespace fs = std::filesystem;
using ::midtune::testing::Finished;
using ::midtune::testing::run_process;

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

inline fs::path peers_dir() {
  if (const char* env = std::getenv("MIDTUNE_PEERS_DIR"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return home ? fs::path(home) / ".cache/midtune/peers-0.3.36" : fs::path();
}

inline fs::path python() { return peers_dir() / "venv/bin/python"; }
inline fs::path llama_simple() { return peers_dir() / "bin/llama-simple"; }

// What is missing of `needed`, in words; empty when all is there.
inline std::string missing(const std::vector<fs::path>& needed) {
  std::string out;
  for (const auto& p : needed)
    if (!fs::exists(p)) out += (out.empty() ? "" : ", ") + p.string();
  return out.empty() ? out : "peers missing: " + out + " (scripts/fetch_peers.sh makes them)";
}

// Skips the test when something is missing, or fails it under CI=true.
#define REQUIRE_PEERS(...)                                 \
  do {                                                     \
    const std::string why = missing({__VA_ARGS__});        \
    if (!why.empty()) {                                    \
      if (in_ci()) FAIL() << why << "; CI=true: a failure"; \
      GTEST_SKIP() << why;                                 \
    }                                                      \
  } while (0)

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "midtune-peer-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string describe(const Finished& f) {
  return "exit " + std::to_string(f.exit_code) + " signal " + std::to_string(f.signal) + "\nstdout:\n" + f.out +
         "\nstderr:\n" + f.err;
}

// The numpy reference's last-position logits of each sequence
// (peer_reference.py; "fp32" or "fp64").
inline std::vector<std::vector<double>> reference_logits(const fs::path& model, const std::string& precision,
                                                  const std::vector<std::vector<std::int32_t>>& sequences,
                                                  std::size_t vocab) {
  ScratchDir dir;
  const fs::path in = dir.path() / "sequences.txt", out = dir.path() / "logits.f64";
  {
    std::ofstream f(in);
    for (const auto& s : sequences) {
      for (std::size_t i = 0; i < s.size(); ++i) f << (i ? " " : "") << s[i];
      f << "\n";
    }
  }
  const Finished run = run_process({python().string(), midtune::testing::source_dir() + "/tests/reference/peer_reference.py",
                                    "--precision", precision, model.string(), in.string(), out.string()},
                                   dir.path().string());
  if (run.exit_code != 0) throw std::runtime_error("peer_reference.py failed: " + describe(run));
  std::ifstream f(out, std::ios::binary);
  std::vector<std::vector<double>> rows(sequences.size(), std::vector<double>(vocab));
  for (auto& row : rows) f.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(vocab * sizeof(double)));
  if (!f || f.peek() != std::char_traits<char>::eof())
    throw std::runtime_error(out.string() + ": expected " + std::to_string(sequences.size()) + " x " +
                             std::to_string(vocab) + " float64 logits");
  return rows;
}

inline std::vector<float> last_logits(Model& model, Sequence& seq, std::span<const std::int32_t> tokens) {
  const int last = static_cast<int>(tokens.size()) - 1;
  return model.forward(seq, tokens, {}, std::span<const int>(&last, 1));
}

template <typename T>
inline int argmax(const std::vector<T>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy tokens after `prompt`, ending with the end-of-generation token if
// one came (as llama-simple: it stops there without printing it).
inline std::vector<std::int32_t> engine_greedy(Model& model, const Tokenizer& tokenizer,
                                        const std::vector<std::int32_t>& prompt, int steps) {
  const ModelConfig& c = model.config();
  Sequence seq(model, static_cast<int>(prompt.size()) + steps, SequenceScales::ones(c.layers, c.heads));
  std::vector<float> logits = last_logits(model, seq, prompt);
  std::vector<std::int32_t> out;
  while (static_cast<int>(out.size()) < steps) {
    const std::int32_t next = argmax(logits);
    out.push_back(next);
    if (tokenizer.is_end_of_generation(next)) break;
    logits = last_logits(model, seq, std::span<const std::int32_t>(&next, 1));
  }
  return out;
}

// The pieces as llama-simple prints them (special tokens' text too); a final
// end-of-generation token is not printed.
inline std::string render(const Tokenizer& tokenizer, std::span<const std::int32_t> ids) {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (i + 1 < ids.size() || !tokenizer.is_end_of_generation(ids[i])) text += tokenizer.token_piece(ids[i], true);
  return text;
}

// llama-simple's text: the prompt's pieces, then the continuation's, then "\n".
inline std::string llama_simple_text(const fs::path& model, const std::string& prompt, int steps) {
  ScratchDir dir;
  const Finished run = run_process(
      {llama_simple().string(), "-m", model.string(), "-n", std::to_string(steps), prompt}, dir.path().string());
  if (run.exit_code != 0) throw std::runtime_error("llama-simple failed: " + describe(run));
  if (run.out.empty() || run.out.back() != '\n') throw std::runtime_error("llama-simple: no final newline:\n" + run.out);
  return run.out.substr(0, run.out.size() - 1);
}

// How many continuation steps the engine's text keeps to llama.cpp's.
inline std::size_t agreed_steps(const Tokenizer& tokenizer, const std::string& prompt_text,
                         const std::vector<std::int32_t>& continuation, const std::string& llama_text) {
  std::string text = prompt_text;
  std::size_t k = 0;
  for (; k < continuation.size(); ++k) {
    const std::int32_t id = continuation[k];
    if (tokenizer.is_end_of_generation(id)) {
      if (text != llama_text) break;  // llama.cpp went on
      continue;
    }
    const std::string next = text + tokenizer.token_piece(id, true);
    if (!llama_text.starts_with(next)) break;
    text = next;
  }
  return k;
}

// Where the engine's greedy text left llama-simple's.
struct Parting {
  std::string label;
  std::vector<std::int32_t> agreed;  // prompt + the steps both took
  std::size_t step;                  // the continuation step where they part
  std::int32_t ours;                 // the engine's next token
  std::string engine_text, llama_text;
};

// Engine vs llama-simple on each prompt, `steps` greedy tokens. Identical
// texts are printed; the partings are returned for the reference to judge
// (one Python run per file, as loading the reference dominates).
// `device`: where the engine runs (null: the CPU engine at the best ISA).
// `llama_texts`: llama-simple's text of each prompt where the caller has it
// (llama_simple_text; empty: run it now).
inline std::vector<Parting> compare_greedy(const fs::path& file, const std::string& label,
                                    const std::vector<std::string>& prompts, int steps,
                                    const std::vector<int>& prompt_numbers = {}, Device* device = nullptr,
                                    const std::vector<std::string>& llama_texts = {}) {
  const std::unique_ptr<Model> owned =
      device != nullptr ? std::make_unique<Model>(file, *device) : std::make_unique<Model>(file);
  Model& model = *owned;
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  std::vector<Parting> partings;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const std::string name = label + (prompt_numbers.empty() ? "" : " prompt " + std::to_string(prompt_numbers[p]));
    const std::vector<std::int32_t> prompt = tokenizer.encode(prompts[p], tokenizer.add_bos_default(), true);
    const std::vector<std::int32_t> continuation = engine_greedy(model, tokenizer, prompt, steps);
    const std::string prompt_text = render(tokenizer, prompt);
    const std::string engine_text = prompt_text + render(tokenizer, continuation);
    const std::string llama_text = llama_texts.empty() ? llama_simple_text(file, prompts[p], steps) : llama_texts.at(p);
    EXPECT_TRUE(llama_text.starts_with(prompt_text)) << name << ": the prompt renders differently:\n"
                                                     << prompt_text << "\nllama-simple:\n" << llama_text;
    const std::size_t agreed = agreed_steps(tokenizer, prompt_text, continuation, llama_text);
    if (agreed == continuation.size()) {
      EXPECT_EQ(engine_text, llama_text) << name << ": every engine step agrees but the texts differ";
      std::printf("  %-24s identical over %zu steps\n", name.c_str(), agreed);
      continue;
    }
    std::vector<std::int32_t> prefix = prompt;
    prefix.insert(prefix.end(), continuation.begin(), continuation.begin() + static_cast<std::ptrdiff_t>(agreed));
    partings.push_back({name, std::move(prefix), agreed, continuation[agreed], engine_text, llama_text});
  }
  return partings;
}

// Each parting must fall at a near-tie of the reference (`ref`: its logits
// after each parting's agreed tokens), the engine's token one of its top two.
inline void expect_near_ties(const std::vector<Parting>& partings, const std::vector<std::vector<double>>& ref,
                      double near_tie) {
  for (std::size_t i = 0; i < partings.size(); ++i) {
    const Parting& p = partings[i];
    std::vector<int> order(ref[i].size());
    for (std::size_t t = 0; t < order.size(); ++t) order[t] = static_cast<int>(t);
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](int a, int b) { return ref[i][a] > ref[i][b]; });
    const double margin = ref[i][order[0]] - ref[i][order[1]];
    std::printf("  %-24s parted at step %zu (reference top-2 margin %.3f, near-tie below %.2f; the engine took its %s)\n",
                p.label.c_str(), p.step, margin, near_tie,
                p.ours == order[0] ? "top-1" : p.ours == order[1] ? "second" : "neither of the two");
    EXPECT_LT(margin, near_tie) << p.label << ": parted from llama-simple, not at a near-tie\nengine:\n"
                                << p.engine_text << "\nllama-simple:\n" << p.llama_text;
    EXPECT_TRUE(p.ours == order[0] || p.ours == order[1])
        << p.label << ": the engine's token " << p.ours << " is not among the reference's top two";
  }
}

inline std::vector<std::vector<std::int32_t>> agreed_prefixes(const std::vector<Parting>& partings) {
  std::vector<std::vector<std::int32_t>> sequences;
  for (const auto& p : partings) sequences.push_back(p.agreed);
  return sequences;
}

inline void expect_near_ties(const fs::path& file, const std::string& precision, const std::vector<Parting>& partings,
                      double near_tie, std::size_t vocab) {
  if (partings.empty()) return;
  expect_near_ties(partings, reference_logits(file, precision, agreed_prefixes(partings), vocab), near_tie);
}

// Worst |engine - reference| over all last-position logits of `prompts`, and
// how many prompts keep the reference's top-1 token.
struct LogitComparison {
  double worst = 0.0;
  int top1_kept = 0;
};

inline LogitComparison compare_logits(Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                               std::span<const std::vector<double>> ref) {
  const ModelConfig& c = model.config();
  LogitComparison out;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    Sequence seq(model, static_cast<int>(prompts[p].size()), SequenceScales::ones(c.layers, c.heads));
    const std::vector<float> got = last_logits(model, seq, prompts[p]);
    for (std::size_t i = 0; i < got.size(); ++i) out.worst = std::max(out.worst, std::fabs(got[i] - ref[p][i]));
    out.top1_kept += argmax(got) == argmax(ref[p]);
  }
  return out;
}

inline LogitComparison compare_logits(const fs::path& file, const std::string& precision,
                               const std::vector<std::vector<std::int32_t>>& prompts) {
  Model model(file);
  return compare_logits(model, prompts, reference_logits(file, precision, prompts, model.config().vocab));
}


}  // namespace midtune::engine::peer
