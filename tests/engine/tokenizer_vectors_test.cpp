// llama.cpp's own tokenizer test vectors (models/ggml-vocab-*.gguf with
// .inp/.out cases, fetched by scripts/fetch_vocabs.sh): every case of every
// supported vocabulary must give llama.cpp's token ids exactly. As in
// llama.cpp's test-tokenizer-0: no BOS, special tokens not parsed.
// "gemma-3": the real Gemma 3's own vocabulary (the pinned llama.cpp ships
// none: its ggml-vocab-gemma-4 is Gemma 4's BPE), with the same texts and a
// few in Gemma's forms, the ids from llama-tokenize (scripts/fetch_peers.sh
// writes them beside the model in MIDTUNE_PEERS_DIR).
#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/gguf/tokenizer.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;

fs::path vocab_dir() {
  if (const char* env = std::getenv("MIDTUNE_VOCAB_DIR"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return home ? fs::path(home) / ".cache/midtune/llama.cpp-vocab-0.3.36" : fs::path();
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path peers_dir() {
  if (const char* env = std::getenv("MIDTUNE_PEERS_DIR"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return home ? fs::path(home) / ".cache/midtune/peers-0.3.36" : fs::path();
}

// The vocabulary file (its .inp/.out beside it) and what makes it.
std::pair<fs::path, std::string> vocabulary(const std::string& name) {
  if (name == "gemma-3") return {peers_dir() / "gemma-3-270m-q4_k_m.gguf", "scripts/fetch_peers.sh"};
  return {vocab_dir() / ("ggml-vocab-" + name + ".gguf"), "scripts/fetch_vocabs.sh"};
}

struct Case {
  std::string text;
  std::vector<std::int32_t> ids;
};

// .inp: cases separated by "\n__ggml_vocab_test__\n"; .out: one line of ids per case.
std::vector<Case> read_cases(const fs::path& gguf) {
  const std::string inp = read_file(gguf.string() + ".inp");
  const std::string out = read_file(gguf.string() + ".out");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  std::size_t at = 0;
  while (at <= inp.size()) {
    const std::size_t next = inp.find(separator, at);
    if (next == std::string::npos) break;  // the file ends with a separator
    cases.push_back({inp.substr(at, next - at), {}});
    at = next + separator.size();
  }
  std::istringstream lines(out);
  std::string line;
  for (Case& c : cases) {
    if (!std::getline(lines, line)) break;
    std::istringstream ids(line);
    for (std::int32_t id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, EveryCaseGivesLlamaCppsIds) {
  const auto [gguf, maker] = vocabulary(GetParam());
  if (!fs::exists(gguf.string() + ".out")) {
    // CI fetched them (scripts/setup.sh, scripts/test.sh): a missing file there is a failure.
    if (std::getenv("CI")) FAIL() << gguf << ".out missing: " << maker << " makes it";
    GTEST_SKIP() << gguf << ".out missing (run " << maker << ")";
  }
  const GgufFile file(gguf);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file);
  const std::vector<Case> cases = read_cases(gguf);
  ASSERT_GE(cases.size(), 20u) << gguf;
  int mismatches = 0;
  for (const Case& c : cases) {
    const std::vector<std::int32_t> got = tokenizer.encode(c.text, /*add_bos=*/false, /*parse_special=*/false);
    if (got != c.ids) {
      ++mismatches;
      std::ostringstream g, w;
      for (auto id : got) g << ' ' << id;
      for (auto id : c.ids) w << ' ' << id;
      ADD_FAILURE() << GetParam() << ": text \"" << c.text << "\"\n  got:     " << g.str() << "\n  llama.cpp:" << w.str();
    }
  }
  RecordProperty("cases", static_cast<int>(cases.size()));
  std::cout << GetParam() << ": " << cases.size() - mismatches << " of " << cases.size() << " cases identical\n";
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerVectors,
                         ::testing::Values("llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3", "mpt", "starcoder", "refact",
                                           "command-r", "gemma-3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace midtune
