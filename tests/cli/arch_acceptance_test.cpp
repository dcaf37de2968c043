// ga-run end to end on a small random GGUF of each architecture
// (tests/engine/tiny_arch_gguf.hpp: qwen2, llama3, gemma, gemma2, with their real
// vocabularies from MIDTUNE_VOCAB_DIR; skipped without it): `generate` with
// the chat template, `eval` of the baseline and of one intervention of every
// method, an LPES search (Bezier degree 1: the models have 2 layers) and its
// report. The models are random, so accuracy is not the point: every command
// must run to the end and write its results, which one prompt per gold
// position and a 2-genome GA over one generation show as well as more would.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include "backends/engine/gguf/gguf.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/tiny_arch_gguf.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using testing::run_ga_run;

fs::path vocab_dir() {
  if (const char* env = std::getenv("MIDTUNE_VOCAB_DIR"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return home ? fs::path(home) / ".cache/midtune/llama.cpp-vocab-0.3.36" : fs::path();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

class ArchAcceptance : public testing::TempDirTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(ArchAcceptance, GenerateEvalEveryMethodAndAnLpesSearchRunEndToEnd) {
  const testing::TinyArchSpec* spec = nullptr;
  const auto specs = testing::tiny_arch_specs();
  for (const auto& s : specs) {
    if (s.name == GetParam()) spec = &s;
  }
  ASSERT_NE(spec, nullptr);
  if (!fs::exists(vocab_dir() / spec->vocab_file)) GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  const std::string model = path(spec->name + ".gguf");
  testing::TinyGgufWriter::write(model, testing::tiny_arch_gguf(*spec, GgufFile(vocab_dir() / spec->vocab_file)));

  const auto generated = run_ga_run({"generate", "--model", model, "--prompt", "The capital of France is", "--chat",
                                     "--max-tokens", "8", "--threads", "2"},
                                    dir_.string());
  ASSERT_EQ(generated.exit_code, 0) << generated.err;
  EXPECT_FALSE(generated.out.empty());

  write_text(path("exp.yaml"), "name: tiny-" + spec->name + R"(
seed: 1234
backend: {kind: engine, model: )" + model + R"(, device: cpu, threads: 2}
dataset:
  kind: kv
  file: null
  pairs: 3
  gold_positions: [0.0, 0.5, 1.0]
  search_samples: 1
  heldout_samples: 1
  metric: teacher_forced
  prime_answer: true
objective:
  kind: lpes
  weights: {beginning: 0.2, middle: 0.3, end: 0.5}
  lpes: {curve: bezier, degree: 1, x_step: 1, y_min: 1.0, y_max: 1.2, y_step: 0.02}
search:
  strategy: ga
  ga: {population: 2, parents: 1, generations: 1, mutants: 1, crossovers: 0}
storage: {db: results.db}
)");
  const std::map<std::string, std::string> interventions = {
      {"baseline", "{}"},
      {"lpes", R"({"rope_scale": [[1.5], [2.0]]})"},
      {"pi", R"({"rope_scale": [[2.0]]})"},
      {"mspoe", R"({"mspoe": {"min_ratio": 1.2, "max_ratio": 1.8, "first_layer": 0, "alpha": 3.0,
                   "order": "awareness", "reference_spacing": false}})"},
      {"caliope", R"({"position_map": {"kind": "moses", "gap": 40.0}})"},
      {"siw", R"({"siw": {"alpha_dense": 0.5, "alpha_sparse": 1.5, "sigma": 1.0, "layers": [0, 1]}})"},
      {"phs", R"({"hidden_channel": {"channel": 3, "scale": 0.0, "layers": [0, 1]}})"},
  };
  for (const auto& [method, json] : interventions) {
    write_text(path(method + ".json"), json);
    const auto eval = run_ga_run({"eval", path("exp.yaml"), "--intervention", path(method + ".json")}, dir_.string());
    EXPECT_EQ(eval.exit_code, 0) << method << ": " << eval.err;
    EXPECT_NE(eval.out.find(", 3 prompts"), std::string::npos) << method << ": " << eval.out;
  }

  const auto search = run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string());
  ASSERT_EQ(search.exit_code, 0) << search.err;
  const auto report = run_ga_run({"report", path("results.db")}, dir_.string());
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("tiny-" + spec->name), std::string::npos) << report.out;
}

INSTANTIATE_TEST_SUITE_P(Architectures, ArchAcceptance, ::testing::Values("qwen2", "llama3", "gemma", "gemma2"),
                         [](const auto& info) { return info.param; });

// MPT has no RoPE (ALiBi): `ga-run validate` refuses the methods that scale
// or remap RoPE positions by name and says why (exit 2), and accepts the two
// that apply (SIW, PHS); `eval` refuses an intervention file the same way.
TEST_F(ArchAcceptance, MptRefusesTheRopeMethodsByNameAtValidate) {
  const auto specs = testing::tiny_arch_specs();
  const auto spec = std::find_if(specs.begin(), specs.end(), [](const auto& s) { return s.name == "mpt"; });
  ASSERT_NE(spec, specs.end());
  if (!fs::exists(vocab_dir() / spec->vocab_file)) GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  const std::string model = path("mpt.gguf");
  testing::TinyGgufWriter::write(model, testing::tiny_arch_gguf(*spec, GgufFile(vocab_dir() / spec->vocab_file)));
  const auto experiment = [&](const std::string& name, const std::string& objective) {
    const std::string file = path(name + ".yaml");
    write_text(file, "name: mpt-" + name + "\nbackend: {kind: engine, model: " + model +
                         ", device: cpu, threads: 2}\n"
                         "dataset: {kind: kv, pairs: 4, search_samples: 1, heldout_samples: 1}\n"
                         "objective:\n" + objective + "search: {strategy: random}\n");
    return file;
  };
  const std::map<std::string, std::string> refused = {
      {"lpes", "  kind: lpes\n  lpes: {curve: bezier, degree: 1, x_step: 1, y_min: 1.0, y_max: 1.2, y_step: 0.02}\n"},
      {"pi", "  kind: pi\n"},
      {"mspoe", "  kind: mspoe\n  mspoe: {genes: {first_layer: 0}}\n"},
      {"caliope", "  kind: caliope\n"},
  };
  for (const auto& [method, objective] : refused) {
    const auto v = run_ga_run({"validate", experiment(method, objective)}, dir_.string());
    EXPECT_EQ(v.exit_code, 2) << method << ": " << v.out << v.err;
    EXPECT_NE(v.err.find(method), std::string::npos) << v.err;
    EXPECT_NE(v.err.find("has no RoPE"), std::string::npos) << v.err;
    EXPECT_NE(v.err.find("'mpt'"), std::string::npos) << v.err;
  }
  const std::map<std::string, std::string> accepted = {
      {"siw", "  kind: siw\n  siw: {genes: {first_layer: 0, last_layer: 1}}\n"},
      {"phs", "  kind: phs\n  phs: {genes: {channel: 3, first_layer: 0, last_layer: 1}}\n"},
  };
  for (const auto& [method, objective] : accepted) {
    const auto v = run_ga_run({"validate", experiment(method, objective)}, dir_.string());
    EXPECT_EQ(v.exit_code, 0) << method << ": " << v.err;
  }
  write_text(path("pi.json"), R"({"rope_scale": [[2.0]]})");
  const auto eval = run_ga_run({"eval", experiment("plain", "  kind: pi\n"), "--intervention", path("pi.json")},
                               dir_.string());
  EXPECT_NE(eval.exit_code, 0);
  EXPECT_NE(eval.err.find("has no RoPE"), std::string::npos) << eval.err;
}

}  // namespace
}  // namespace midtune
