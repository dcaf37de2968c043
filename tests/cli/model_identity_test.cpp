// A result must say which weights and which data produced it: ga-run on two
// model files that share a name and shapes but not their weights never
// shares an evaluation (a byte-identical copy elsewhere does), `status` and
// `report` name the model's content hash, and a resume over replaced data or
// over an experiment stored without these records is refused, naming why.
// The models are small random GGUFs with a real vocabulary
// (tests/engine/tiny_arch_gguf.hpp; skipped without MIDTUNE_VOCAB_DIR); the
// data tests run on the synthetic test double.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <set>
#include <thread>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/engine/gguf/gguf.hpp"
#include "tests/cli/results_db.hpp"
#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/tiny_arch_gguf.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;
using testing::query_rows;
using testing::run_ga_run;

fs::path vocab_dir() {
  if (const char* env = std::getenv("MIDTUNE_VOCAB_DIR"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return home ? fs::path(home) / ".cache/midtune/llama.cpp-vocab-0.3.36" : fs::path();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

class ModelIdentityRun : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    // The content-hash cache of the runs this test starts stays in its folder.
    ::setenv("MIDTUNE_CACHE", path("cache").c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("MIDTUNE_CACHE");
    TempDirTest::TearDown();
  }

  // One prompt per gold position and split, a 2-genome GA: what is checked
  // is which evaluations are shared and what computed them, not scores.
  std::string engine_experiment(const std::string& name, const std::string& model) const {
    return "name: " + name + R"(
seed: 99
backend: {kind: engine, model: )" + model + R"(, device: cpu, threads: 2}
dataset: {kind: kv, pairs: 3, gold_positions: [0.0, 0.5, 1.0], search_samples: 1, heldout_samples: 1,
          metric: teacher_forced, prime_answer: true}
objective:
  kind: lpes
  lpes: {curve: bezier, degree: 1, x_step: 1, y_min: 1.0, y_max: 1.2, y_step: 0.05}
search:
  strategy: ga
  ga: {population: 2, parents: 1, generations: 1, mutants: 1, crossovers: 0}
storage: {db: results.db}
)";
  }

  // "<individuals of `later`> | <how many of them reuse an evaluation of `earlier`'s individuals>".
  std::string reuse(const std::string& earlier, const std::string& later) const {
    const auto rows = query_rows(
        path("results.db"),
        "SELECT count(*), coalesce(sum(i.evaluation_id IN (SELECT j.evaluation_id FROM individuals j JOIN "
        "experiments y ON y.id = j.experiment_id WHERE y.name = '" + earlier + "')), 0) FROM individuals i JOIN "
        "experiments x ON x.id = i.experiment_id WHERE x.name = ?1",
        later);
    return rows.at(0);
  }
};

TEST_F(ModelIdentityRun, EditedWeightsUnderTheSameNameNeverShareAnEvaluation) {
  const auto specs = testing::tiny_arch_specs();
  const testing::TinyArchSpec& spec = specs.at(1);  // llama3: a real BPE vocabulary
  if (!fs::exists(vocab_dir() / spec.vocab_file)) GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  const std::string original = path("model.gguf"), edited = path("edited.gguf"), copy = path("copy.gguf");
  testing::TinyGgufWriter::write(original, testing::tiny_arch_gguf(spec, GgufFile(vocab_dir() / spec.vocab_file)));
  fs::copy_file(original, copy);
  fs::copy_file(original, edited);
  {  // The last layer's feed-forward output zeroed: same name, shapes and tokenizer, other answers.
    const GgufFile file(edited);
    const GgufTensorInfo& down = file.tensor("blk.1.ffn_down.weight");
    const std::uint64_t at = file.data_offset() + down.offset, bytes = down.n_bytes;
    std::fstream out(edited, std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(static_cast<std::streamoff>(at));
    const std::vector<char> zeros(bytes, 0);
    out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    ASSERT_TRUE(out.good());
  }

  write_text(path("original.yaml"), engine_experiment("original", original));
  write_text(path("edited.yaml"), engine_experiment("edited", edited));
  write_text(path("copy.yaml"), engine_experiment("copy", copy));
  for (const std::string name : {"original", "edited", "copy"}) {
    const auto run = run_ga_run({path(name + ".yaml"), "--quiet"}, dir_.string());
    ASSERT_EQ(run.exit_code, 0) << name << ": " << run.err;
  }
  const std::string individuals = query_rows(path("results.db"),
                                             "SELECT count(*) FROM individuals i JOIN experiments e ON e.id = "
                                             "i.experiment_id WHERE e.name = 'original'")
                                      .at(0);
  ASSERT_NE(individuals, "0");
  EXPECT_EQ(reuse("original", "edited"), individuals + " | 0")
      << "the edited weights were scored with the original's cached evaluations";
  EXPECT_EQ(reuse("original", "copy"), individuals + " | " + individuals)
      << "a byte-identical copy at another path is the same model: every evaluation from the cache";
  EXPECT_EQ(query_rows(path("results.db"), "SELECT count(DISTINCT model) FROM evaluations"),
            (std::vector<std::string>{"2"}));

  // Both content hashes are shown, one per experiment, and they differ.
  const auto status = run_ga_run({"status", path("results.db")}, dir_.string());
  ASSERT_EQ(status.exit_code, 0) << status.err;
  std::vector<std::string> hashes;
  for (const std::string name : {"original:", "edited:", "copy:"}) {
    const auto line = status.out.find("\n" + name);
    ASSERT_NE(line, std::string::npos) << status.out;
    const auto hash = status.out.find("xxh3-128:", line);
    ASSERT_NE(hash, std::string::npos) << status.out;
    hashes.push_back(status.out.substr(hash, 41));
  }
  EXPECT_NE(hashes[0], hashes[1]);
  EXPECT_EQ(hashes[0], hashes[2]);
  const auto report = run_ga_run({"report", path("results.db"), "--experiment", "edited"}, dir_.string());
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("Run on: midtune-tiny-llama3 (llama, 2 layers, " + hashes[1]), std::string::npos)
      << report.out;
}

bool cpu_has_avx2() {
  std::ifstream in("/proc/cpuinfo");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return text.find(" avx2") != std::string::npos;
}

// Each run records what computed it; a resume on another kernel path (here
// forced with MIDTUNE_ISA) warns once, and the report marks which kernel
// path computed which generations.
TEST_F(ModelIdentityRun, AResumeOnAnotherKernelPathWarnsAndTheReportSaysWhichComputedWhat) {
  const auto specs = testing::tiny_arch_specs();
  const testing::TinyArchSpec& spec = specs.at(1);
  if (!fs::exists(vocab_dir() / spec.vocab_file)) GTEST_SKIP() << "vocabulary files not found (set MIDTUNE_VOCAB_DIR)";
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has only the scalar kernel path";
  const std::string model = path("model.gguf");
  testing::TinyGgufWriter::write(model, testing::tiny_arch_gguf(spec, GgufFile(vocab_dir() / spec.vocab_file)));
  std::string yaml = engine_experiment("paths", model);
  // Generations left after the first: the kill lands before the run ends.
  yaml.replace(yaml.find("generations: 1"), 14, "generations: 4");
  write_text(path("paths.yaml"), yaml);

  // Scalar kernels until the first generation is stored, then kill -9.
  ::setenv("MIDTUNE_ISA", "scalar", 1);
  const pid_t scalar_run = testing::spawn_ga_run({path("paths.yaml"), "--quiet"}, path("out1.txt"), path("err1.txt"));
  ::unsetenv("MIDTUNE_ISA");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool stored = false;
  while (!stored && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fs::exists(path("results.db")))
      try {
        stored = query_rows(path("results.db"), "SELECT count(*) FROM generations").at(0) != "0";
      } catch (const std::exception&) {  // the schema may not be there yet
      }
  }
  ::kill(scalar_run, SIGKILL);
  ::waitpid(scalar_run, nullptr, 0);
  ASSERT_TRUE(stored) << testing::read_file(path("err1.txt"));

  ::setenv("MIDTUNE_ISA", "avx2", 1);
  const auto resumed = run_ga_run({path("paths.yaml"), "--quiet"}, dir_.string());
  ::unsetenv("MIDTUNE_ISA");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(count_of(resumed.err, "warning: experiment 'paths' was computed by run 1"), 1u) << resumed.err;
  EXPECT_NE(resumed.err.find("kernel_path scalar -> avx2"), std::string::npos) << resumed.err;

  const auto report = run_ga_run({"report", path("results.db"), "--format", "json"}, dir_.string());
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const auto json = nlohmann::json::parse(report.out);
  std::set<std::string> paths;
  for (const auto& g : json.at("generations")) paths.insert(g.at("computed_on").get<std::string>());
  EXPECT_EQ(paths, (std::set<std::string>{"scalar", "avx2"})) << json.at("generations").dump();
  ASSERT_EQ(json.at("runs").size(), 2u);
  EXPECT_FALSE(json.at("runs")[1].at("provenance").at("build").at("version").get<std::string>().empty());
  EXPECT_EQ(json.at("runs")[1].at("provenance").at("execution").at("threads"), 2);
  const auto status = run_ga_run({"status", path("results.db")}, dir_.string());
  EXPECT_NE(status.out.find("last run: midtune "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("kernel path avx2, device cpu, 2 threads"), std::string::npos) << status.out;
}

// A KV file of `items` items with `pairs` pairs each; `variant` changes the
// values (the same keys, another answer to every question).
std::string kv_file(int items, int pairs, int variant) {
  std::string out;
  for (int i = 0; i < items; ++i) {
    std::string records;
    for (int p = 0; p < pairs; ++p)
      records += std::string(p ? ", " : "") + "[\"key-" + std::to_string(i) + "-" + std::to_string(p) + "\", \"value-" +
                 std::to_string(i) + "-" + std::to_string(p) + "-" + std::to_string(variant) + "\"]";
    out += "{\"ordered_kv_records\": [" + records + "], \"key\": \"key-" + std::to_string(i) + "-0\", \"value\": \"value-" +
           std::to_string(i) + "-0-" + std::to_string(variant) + "\"}\n";
  }
  return out;
}

std::string synthetic_kv_experiment() {
  return R"(name: data-check
seed: 5
backend: {kind: synthetic-test-double, layers: 8, heads: 2, noise: 0.05}
dataset: {kind: kv, file: kv.jsonl, pairs: 4, gold_positions: [0.0, 0.5, 1.0], search_samples: 3,
          heldout_samples: 3, metric: teacher_forced}
objective:
  kind: lpes
  lpes: {curve: bezier, degree: 2}
search:
  strategy: ga
  ga: {population: 6, parents: 3, generations: 2, mutants: 2, crossovers: 1}
)";
}

TEST_F(ModelIdentityRun, ReplacedDataUnderTheSameNameRefusesTheResume) {
  write_text(path("kv.jsonl"), kv_file(10, 4, 0));
  write_text(path("exp.yaml"), synthetic_kv_experiment());
  const auto first = run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // The same data again resumes (a finished run: nothing to do).
  ASSERT_EQ(run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string()).exit_code, 0);

  const auto slices = query_rows(path("results.db"), "SELECT DISTINCT dataset_slice FROM evaluations ORDER BY 1");
  write_text(path("kv.jsonl"), kv_file(10, 4, 1));
  const auto refused = run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string());
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("dataset.contents: \"kv.jsonl#"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--new-experiment"), std::string::npos) << refused.err;
  EXPECT_EQ(query_rows(path("results.db"), "SELECT DISTINCT dataset_slice FROM evaluations ORDER BY 1"), slices)
      << "nothing was evaluated on the new data under the old experiment";

  // Under a new experiment name the new data runs, and none of it comes from the old data's cache.
  const auto fresh = run_ga_run({path("exp.yaml"), "--quiet", "--new-experiment", "new-data"}, dir_.string());
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  const std::string reused = reuse("data-check", "new-data");
  EXPECT_EQ(reused.substr(reused.find('|')), "| 0") << "an evaluation of the old data scored the new";
}

TEST_F(ModelIdentityRun, AnExperimentStoredWithoutTheseRecordsIsRefusedSayingWhy) {
  write_text(path("kv.jsonl"), kv_file(10, 4, 0));
  write_text(path("exp.yaml"), synthetic_kv_experiment());
  ASSERT_EQ(run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string()).exit_code, 0);
  {  // What a results file written before the model and data contents were recorded holds.
    sql::Database db(path("results.db"), sql::Database::Mode::read_write);
    db.exec("UPDATE experiments SET search_config = json_remove(search_config, '$.backend.identity', "
            "'$.dataset.contents')");
  }
  const auto status = run_ga_run({"status", path("results.db")}, dir_.string());
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("data-check: model not recorded"), std::string::npos) << status.out;
  const auto refused = run_ga_run({path("exp.yaml"), "--quiet"}, dir_.string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("did not record the model's and the data's contents"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--new-experiment"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace midtune
