// The experiment file: a valid file round-trips with defaults filled in, every
// class of mistake is reported at file:line:col with its key path and reason,
// and search_differences names exactly what changed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/experiment/experiment.hpp"
#include "core/experiment/nearest_name.hpp"
#include "tests/test_paths.hpp"

namespace midtune {
namespace {

namespace fs = std::filesystem;

// The README's example, minus the parts a stricter test changes.
const char* const kValid = R"(name: quickstart
seed: 1234
backend:
  kind: engine
  model: models/tiny.gguf
  device: cpu
  threads: 2
dataset:
  kind: kv
  pairs: 50
  gold_positions: [0.0, 0.5, 1.0]
  search_samples: 20
  heldout_samples: 50
  metric: teacher_forced
objective:
  kind: lpes
  weights: {beginning: 0.2, middle: 0.3, end: 0.5}
  lpes:
    curve: bezier
    degree: 3
search:
  strategy: ga
  ga:
    population: 32
    parents: 12
    mutation_y: 0.2
)";

class ExperimentFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("midtune_experiment_") + info->test_suite_name() + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& text, const std::string& name = "experiment.yaml") {
    const fs::path file = dir_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }

  Experiment load(const std::string& text) { return load_experiment(write(text)); }

  // Loads `text`, expecting a ConfigError at line:column for `key_path`
  // whose reason contains `reason_part`.
  void expect_error(const std::string& text, int line, int column, const std::string& key_path,
                    const std::string& reason_part) {
    const fs::path file = write(text);
    try {
      load_experiment(file);
      ADD_FAILURE() << "no error; expected " << key_path << ": " << reason_part;
    } catch (const ConfigError& error) {
      EXPECT_EQ(error.file(), file) << error.what();
      EXPECT_EQ(error.line(), line) << error.what();
      EXPECT_EQ(error.column(), column) << error.what();
      EXPECT_EQ(error.key_path(), key_path) << error.what();
      EXPECT_NE(error.reason().find(reason_part), std::string::npos) << error.what();
      const std::string where = file.string() + ":" + std::to_string(line) + ":" +
                                std::to_string(column) + ": " +
                                (key_path.empty() ? "" : key_path + ": ");
      EXPECT_EQ(std::string(error.what()).rfind(where, 0), 0u) << error.what();
    }
  }

  // kValid with `from` replaced by `to` (which must occur once).
  static std::string edited(const std::string& from, const std::string& to) {
    std::string text = kValid;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from;
    return text.replace(at, from.size(), to);
  }

  fs::path dir_;
};

TEST_F(ExperimentFile, ValidFileParsesWithDefaultsFilledIn) {
  const Experiment e = load(kValid);
  EXPECT_EQ(e.name, "quickstart");
  EXPECT_EQ(e.seed, 1234u);
  EXPECT_EQ(e.backend.kind, "engine");
  EXPECT_EQ(e.backend.model, dir_ / "models" / "tiny.gguf");
  EXPECT_EQ(e.backend.threads, 2);
  EXPECT_EQ(e.dataset.kind, "kv");
  EXPECT_FALSE(e.dataset.file.has_value());
  EXPECT_EQ(e.dataset.max_new_tokens, 100);
  EXPECT_EQ(e.dataset.metric, "teacher_forced");
  EXPECT_EQ(e.objective.weights, (FitnessWeights{0.2, 0.3, 0.5}));
  EXPECT_EQ(e.objective.lpes.y_step, 0.1);
  // Table 12 defaults.
  EXPECT_EQ(e.search.ga.population, 32);
  EXPECT_EQ(e.search.ga.parents, 12);
  EXPECT_EQ(e.search.ga.generations, 20);
  EXPECT_EQ(e.search.ga.mutants, 16);
  EXPECT_EQ(e.search.ga.crossovers, 4);
  EXPECT_EQ(e.search.ga.crossover_tries, 4);
  EXPECT_EQ(e.search.ga.mutation_x, 2);
  EXPECT_EQ(e.search.ga.mutation_y, 0.2);
  EXPECT_EQ(e.storage.db, dir_ / "results.db");
  EXPECT_EQ(e.text, kValid);
}

TEST_F(ExperimentFile, MinimalFileGetsTheDocumentedDefaults) {
  const Experiment e = load(R"(name: m
backend: {kind: synthetic-test-double}
dataset: {kind: kv}
objective: {kind: pi}
)");
  EXPECT_EQ(e.seed, 0u);
  EXPECT_EQ(e.backend.synthetic, SyntheticConfig{});
  EXPECT_EQ(e.dataset.gold_positions, (std::vector<double>{0.0, 0.5, 1.0}));
  EXPECT_EQ(e.dataset.pairs, 50);
  EXPECT_EQ(e.objective.weights, FitnessWeights{});
  EXPECT_EQ(e.objective.pi, PiConfig{});
  EXPECT_EQ(e.search.strategy, "ga");
  EXPECT_EQ(e.search.ga, GaConfig{});
  EXPECT_EQ(e.search.random_samples, 64);
  EXPECT_EQ(e.storage.db, dir_ / "results.db");
}

// A list far longer than any experiment needs (100,000 gold positions took
// gigabytes of prompts) is refused where it is read, naming the key.
TEST_F(ExperimentFile, AHugeListIsRefusedNamingTheKey) {
  std::string positions;
  for (int i = 0; i < 100000; ++i) positions += (i ? ", " : "") + std::to_string(i / 100000.0);
  expect_error("name: m\nbackend: {kind: synthetic-test-double}\ndataset: {kind: kv, gold_positions: [" + positions +
                   "]}\nobjective: {kind: pi}\n",
               3, 37, "dataset.gold_positions", "has 100000 items; at most 1000 are accepted");
}

// A quote left open takes the rest of the file into one value: the error
// names that value and the likely cause, not only the key it swallowed.
TEST_F(ExperimentFile, AQuoteLeftOpenIsNamedWhereItOpens) {
  for (const char* quote : {"\"", "'"}) {
    expect_error(std::string("name: ") + quote +
                     "quick\nbackend: {kind: synthetic-test-double}\ndataset: {kind: kv}\nobjective: {kind: pi}\n",
                 1, 7, "name", "required key 'backend' is inside this value: is a quote left open here?");
  }
}

TEST_F(ExperimentFile, ReadmeExampleIsValid) {
  const fs::path readme = fs::path(midtune::testing::source_dir()) / "experiments" / "README.md";
  std::ifstream in(readme);
  ASSERT_TRUE(in) << readme;
  std::string line;
  std::string yaml;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      if (inside) break;
      inside = line == "```yaml";
      continue;
    }
    if (inside) yaml += line + "\n";
  }
  ASSERT_FALSE(yaml.empty());
  const Experiment e = load(yaml);
  EXPECT_EQ(e.name, "quickstart");
  EXPECT_EQ(e.search.ga, GaConfig{});
}

TEST_F(ExperimentFile, JsonRoundTripsThroughYaml) {
  // to_json is itself a valid experiment (JSON is YAML): loading it back
  // gives the same experiment and the same canonical JSON.
  const Experiment first = load(kValid);
  const Experiment second = load(first.to_json().dump(2));
  EXPECT_EQ(second.to_json(), first.to_json());
  EXPECT_EQ(second.search_hash(), first.search_hash());
  EXPECT_EQ(second.backend, first.backend);
  EXPECT_EQ(second.dataset, first.dataset);
  EXPECT_EQ(second.objective, first.objective);
  EXPECT_EQ(second.search, first.search);
}

TEST_F(ExperimentFile, JsonRoundTripsWithGeneTablesComboAndGrid) {
  const Experiment first = load(R"(name: combo
seed: 18446744073709551615
backend: {kind: server, endpoints: [http://127.0.0.1:8080], timeout_s: 30}
dataset: {kind: mdqa, file: data/nq.jsonl.gz, documents: 20, distractors: other-questions,
          gold_positions: [0, 0.25, 0.5, 0.75, 1], metric: generate}
objective:
  kind: combo
  combo: {methods: [lpes, siw]}
  lpes: {curve: linear, degree: 2}
  siw:
    genes:
      alpha_dense: {min: 0.0, max: 1.0, step: 0.25}
      first_layer: {min: 4, max: 12, start: 8}
      last_layer: {values: [20, 24], start: 24}
  caliope:
    genes:
      calibrator: {values: [hourglass, decay], start: decay}
      lambda: {min: 0.8, max: 1.0, step: 0.05, start: 0.95}
search:
  strategy: grid
  grid:
    values:
      siw.alpha_dense: [0.5, 1.0]
      lpes.y1: [1.2, 1.4]
)");
  EXPECT_EQ(first.seed, 18446744073709551615u);
  EXPECT_EQ(first.dataset.file, dir_ / "data" / "nq.jsonl.gz");
  EXPECT_EQ(first.dataset.documents, 20);
  EXPECT_EQ(first.dataset.chunks(), 20);
  EXPECT_EQ(first.dataset.distractors, "other-questions");
  ASSERT_NE(first.objective.genes_of("caliope"), nullptr);  // set in the file though unused
  EXPECT_EQ(first.objective.genes_of("caliope")->gene("calibrator").start,
            GeneValue(std::string("decay")));
  const Experiment second = load(first.to_json().dump(2));
  EXPECT_EQ(second.to_json(), first.to_json());
  EXPECT_EQ(second.objective, first.objective);
  EXPECT_EQ(second.search, first.search);
  // The fingerprint keeps the methods in use only and the active strategy only.
  const nlohmann::json fingerprint = first.search_fingerprint();
  EXPECT_FALSE(fingerprint["objective"].contains("caliope"));
  EXPECT_FALSE(fingerprint["objective"].contains("pi"));
  EXPECT_TRUE(fingerprint["objective"].contains("siw"));
  EXPECT_FALSE(fingerprint["search"].contains("ga"));
  EXPECT_EQ(fingerprint["dataset"]["file"], "nq.jsonl.gz");
  EXPECT_EQ(fingerprint["dataset"]["max_new_tokens"], 100);
  EXPECT_FALSE(fingerprint["backend"].contains("endpoints"));
}

TEST_F(ExperimentFile, ParseFromStoredTextMatchesLoad) {
  const fs::path file = write(kValid);
  const Experiment loaded = load_experiment(file);
  const Experiment parsed = parse_experiment(loaded.text, file);
  EXPECT_EQ(parsed.to_json(), loaded.to_json());
}

TEST_F(ExperimentFile, PathsResolveTildeAndRelativeToTheFile) {
  const char* home = std::getenv("HOME");
  ASSERT_NE(home, nullptr);
  // The database's directory must exist: "../<this dir>/out" goes up and back down.
  fs::create_directories(dir_ / "out");
  const Experiment e = load(edited("model: models/tiny.gguf", "model: ~/m/tiny.gguf") + "storage: {db: ../" +
                            dir_.filename().string() + "/out/r.db}\n");
  EXPECT_EQ(e.backend.model, fs::path(home) / "m" / "tiny.gguf");
  EXPECT_EQ(e.storage.db, dir_ / "out" / "r.db");
  const Experiment absolute = load(edited("model: models/tiny.gguf", "model: /abs/tiny.gguf"));
  EXPECT_EQ(absolute.backend.model, fs::path("/abs/tiny.gguf"));
}

TEST_F(ExperimentFile, UnknownKeySuggestsTheNearestValidOne) {
  expect_error(edited("    population: 32", "    popuation: 32"), 24, 5, "search.ga.popuation",
               "did you mean 'population'?");
  expect_error(edited("seed: 1234", "sed: 1234"), 2, 1, "sed", "did you mean 'seed'?");
}

TEST_F(ExperimentFile, KeyOfASubsectionWrittenOneLevelUpSuggestsItsPlace) {
  expect_error(edited("  strategy: ga\n", "  strategy: ga\n  generations: 5\n"), 23, 3,
               "search.generations", "did you mean 'ga.generations'?");
  expect_error(edited("  kind: lpes\n", "  kind: lpes\n  degre: 2\n"), 17, 3, "objective.degre",
               "did you mean 'lpes.degree'?");
}

TEST_F(ExperimentFile, UnknownKeyFarFromAnyListsTheValidKeys) {
  expect_error(edited("  metric: teacher_forced", "  zzzzzzzz: 1"), 14, 3, "dataset.zzzzzzzz",
               "valid keys here: kind, file");
}

TEST_F(ExperimentFile, WrongTypeSaysWhatWasExpected) {
  expect_error(edited("    parents: 12", "    parents: many"), 25, 14, "search.ga.parents",
               "expected an integer, got 'many'");
  expect_error(edited("    mutation_y: 0.2", "    mutation_y: [0.2]"), 26, 17,
               "search.ga.mutation_y", "expected a number, got a list");
  expect_error(edited("  gold_positions: [0.0, 0.5, 1.0]", "  gold_positions: 0.5"), 11, 19,
               "dataset.gold_positions", "expected a list");
  expect_error(edited("    degree: 3", "    degree: 2.5"), 20, 13, "objective.lpes.degree",
               "expected an integer");
}

TEST_F(ExperimentFile, OutOfRangeSaysTheAllowedRange) {
  expect_error(edited("    degree: 3", "    degree: 7"), 20, 13, "objective.lpes.degree",
               "must be in [1, 6]");
  expect_error(edited("  gold_positions: [0.0, 0.5, 1.0]", "  gold_positions: [0.0, 1.5]"), 11,
               25, "dataset.gold_positions[1]", "must be in [0, 1]");
  expect_error(edited("  gold_positions: [0.0, 0.5, 1.0]", "  gold_positions: [0.0, 0.7, 0.5]"),
               11, 30, "dataset.gold_positions[2]", "must be increasing");
}

TEST_F(ExperimentFile, WeightsMustBeNonNegativeAndSumToOne) {
  expect_error(edited("{beginning: 0.2, middle: 0.3, end: 0.5}", "{beginning: 0.2, middle: 0.3, end: 0.6}"),
               17, 12, "objective.weights", "sum to 1; they sum to 1.1");
  expect_error(edited("{beginning: 0.2, middle: 0.3, end: 0.5}", "{beginning: -0.2, middle: 0.7, end: 0.5}"),
               17, 24, "objective.weights.beginning", "must be in [0, 1]");
}

TEST_F(ExperimentFile, CrossFieldRulesNameTheKeyAndBothValues) {
  expect_error(edited("    parents: 12", "    parents: 40"), 25, 14, "search.ga.parents",
               "population (32) must be >= parents (40)");
  expect_error(edited("    degree: 3", "    degree: 3\n    y_min: 2.0\n    y_max: 1.5"), 21, 12,
               "objective.lpes.y_min", "y_min (2) must be less than y_max (1.5)");
  expect_error(edited("    parents: 12", "    parents: 10"), 24, 17, "search.ga.population",
               "must equal parents + crossovers + mutants (10 + 4 + 16)");
}

TEST_F(ExperimentFile, EnumValuesListTheChoices) {
  expect_error(edited("  kind: engine", "  kind: gpu"), 4, 9, "backend.kind",
               "must be one of engine | server | synthetic-test-double");
  expect_error(edited("  metric: teacher_forced", "  metric: teacher-forced"), 14, 11,
               "dataset.metric", "did you mean 'teacher_forced'?");
}

TEST_F(ExperimentFile, KeysOfAnotherBackendKindAreRejected) {
  expect_error(edited("  threads: 2", "  threads: 2\n  endpoints: [http://127.0.0.1:8080]"), 8, 14,
               "backend.endpoints", "applies only to backend.kind server (this one is engine)");
}

// A GPU's index and pass size belong to device: cuda; on the CPU they would
// be silently meaningless.
TEST_F(ExperimentFile, GpuKeysApplyToTheCudaDeviceOnly) {
  const Experiment e = load(edited("  device: cpu\n  threads: 2\n", "  device: cuda\n  gpu: 1\n  batch_tokens: 8192\n"));
  EXPECT_EQ(e.backend.device, "cuda");
  EXPECT_EQ(e.backend.gpu, 1);
  EXPECT_EQ(e.backend.batch_tokens, 8192);
  expect_error(edited("  threads: 2", "  threads: 2\n  gpu: 1"), 8, 8, "backend.gpu", "applies to device: cuda only");
  expect_error(edited("  device: cpu\n  threads: 2\n", "  device: cuda\n  gpu: -1\n"), 7, 8, "backend.gpu", "");
}

// precision: fp32 is a CPU-engine setting that changes every answer: it is in
// the search fingerprint (a stored search never resumes under the other
// precision), and the default leaves the fingerprint as it was before the key.
TEST_F(ExperimentFile, Fp32PrecisionIsACpuSettingInTheFingerprint) {
  const Experiment plain = load(edited("  threads: 2\n", "  threads: 2\n"));
  const Experiment native = load(edited("  threads: 2\n", "  threads: 2\n  precision: native\n"));
  const Experiment fp32 = load(edited("  threads: 2\n", "  threads: 2\n  precision: fp32\n"));
  EXPECT_EQ(plain.backend.precision, "native");
  EXPECT_EQ(fp32.backend.precision, "fp32");
  EXPECT_EQ(native.search_fingerprint(), plain.search_fingerprint());
  EXPECT_FALSE(plain.search_fingerprint()["backend"].contains("precision"));
  EXPECT_EQ(fp32.search_fingerprint()["backend"]["precision"], "fp32");
  expect_error(edited("  threads: 2\n", "  threads: 2\n  precision: fp16\n"), 8, 14, "backend.precision", "fp16");
  expect_error(edited("  device: cpu\n  threads: 2\n", "  device: cuda\n  precision: fp32\n"), 7, 14,
               "backend.precision", "applies to device: cpu only");
}

// precision: file keeps the GPU's weights in their GGUF blocks: a device:
// cuda setting, in the fingerprint (a search stored under native never
// resumes under file); on the CPU, which always multiplies the file's own
// blocks, it is refused as saying nothing new (native is that).
TEST_F(ExperimentFile, FilePrecisionIsACudaSettingInTheFingerprint) {
  const std::string cuda = "  device: cuda\n";
  const Experiment native = load(edited("  device: cpu\n  threads: 2\n", cuda));
  const Experiment file = load(edited("  device: cpu\n  threads: 2\n", cuda + "  precision: file\n"));
  EXPECT_EQ(file.backend.precision, "file");
  EXPECT_EQ(file.search_fingerprint()["backend"]["precision"], "file");
  EXPECT_FALSE(native.search_fingerprint()["backend"].contains("precision"));
  EXPECT_NE(file.search_fingerprint(), native.search_fingerprint());
  expect_error(edited("  threads: 2\n", "  threads: 2\n  precision: file\n"), 8, 14, "backend.precision",
               "file applies to device: cuda only (the CPU engine always multiplies the file's own blocks");
}

// kv_cache: bf16 stores the keys and values in bf16 (other numbers), on
// either device: in the fingerprint; fp32, the default, leaves the
// fingerprint as it was before the key (stored searches keep resuming).
TEST_F(ExperimentFile, Bf16KvCacheIsInTheFingerprint) {
  const std::string cuda = "  device: cuda\n";
  const Experiment fp32 = load(edited("  device: cpu\n  threads: 2\n", cuda));
  const Experiment fp32_named = load(edited("  device: cpu\n  threads: 2\n", cuda + "  kv_cache: fp32\n"));
  const Experiment bf16 = load(edited("  device: cpu\n  threads: 2\n", cuda + "  kv_cache: bf16\n"));
  EXPECT_EQ(fp32.backend.kv_cache, "fp32");
  EXPECT_EQ(bf16.backend.kv_cache, "bf16");
  EXPECT_FALSE(fp32.search_fingerprint()["backend"].contains("kv_cache"));
  EXPECT_EQ(fp32_named.search_fingerprint(), fp32.search_fingerprint());
  EXPECT_EQ(bf16.search_fingerprint()["backend"]["kv_cache"], "bf16");
  EXPECT_NE(bf16.search_fingerprint(), fp32.search_fingerprint());
  expect_error(edited("  device: cpu\n  threads: 2\n", cuda + "  kv_cache: fp16\n"), 7, 13, "backend.kv_cache",
               "fp16");
  const Experiment cpu_bf16 = load(edited("  threads: 2\n", "  threads: 2\n  kv_cache: bf16\n"));
  EXPECT_EQ(cpu_bf16.backend.kv_cache, "bf16");
  EXPECT_EQ(cpu_bf16.search_fingerprint()["backend"]["kv_cache"], "bf16");
  EXPECT_NE(cpu_bf16.search_fingerprint(), fp32.search_fingerprint());
}

// attention: flash | gemm | cudnn picks the GPU's prefill attention body; which ran
// is in the model identity (its precision), so the search fingerprint does
// not repeat it and a search stored before the key keeps its fingerprint.
// A device: cuda setting only.
TEST_F(ExperimentFile, AttentionBodyIsACudaSettingOutsideTheFingerprint) {
  const std::string cuda = "  device: cuda\n";
  const Experiment plain = load(edited("  device: cpu\n  threads: 2\n", cuda));
  const Experiment gemm = load(edited("  device: cpu\n  threads: 2\n", cuda + "  attention: gemm\n"));
  const Experiment flash = load(edited("  device: cpu\n  threads: 2\n", cuda + "  attention: flash\n"));
  EXPECT_EQ(plain.backend.attention, "");
  EXPECT_EQ(gemm.backend.attention, "gemm");
  EXPECT_EQ(flash.backend.attention, "flash");
  // cuDNN's body is named in the file whatever the build; a build without
  // cuDNN refuses it when the engine is made (EngineFactory).
  EXPECT_EQ(load(edited("  device: cpu\n  threads: 2\n", cuda + "  attention: cudnn\n")).backend.attention, "cudnn");
  EXPECT_EQ(gemm.search_fingerprint(), plain.search_fingerprint());
  EXPECT_EQ(flash.search_fingerprint(), plain.search_fingerprint());
  expect_error(edited("  device: cpu\n  threads: 2\n", cuda + "  attention: cublas\n"), 7, 14, "backend.attention",
               "cublas");
  expect_error(edited("  threads: 2\n", "  threads: 2\n  attention: gemm\n"), 8, 14, "backend.attention",
               "applies to device: cuda only");
}

TEST_F(ExperimentFile, ServerBackendNeedsEndpoints) {
  const std::string server = "  kind: server\n  endpoints: [http://127.0.0.1:8080, http://127.0.0.1:8081]\n  retries: 5\n";
  const Experiment e = load(edited("  kind: engine\n  model: models/tiny.gguf\n  device: cpu\n  threads: 2\n", server));
  EXPECT_EQ(e.backend.server.endpoints.size(), 2u);
  EXPECT_EQ(e.backend.server.retries, 5);
  expect_error(edited("  kind: engine\n  model: models/tiny.gguf\n  device: cpu\n  threads: 2\n",
                      "  kind: server\n  endpoints: [127.0.0.1:8080]\n"),
               5, 15, "backend.endpoints[0]", "expected http://host:port");
}

TEST_F(ExperimentFile, MissingRequiredKeyPointsAtItsSection) {
  expect_error(edited("  model: models/tiny.gguf\n", ""), 4, 3, "backend.model",
               "missing required key 'model'");
  expect_error(edited("name: quickstart\n", ""), 1, 1, "name", "missing required key 'name'");
  expect_error(edited("  kind: kv\n", "  kind: mdqa\n"), 9, 3, "dataset.file", "needs a file");
  expect_error(edited("  kind: kv\n", "  kind: babilong\n  file: qa2.jsonl\n"), 11, 10, "dataset.pairs",
               "applies only to dataset.kind kv (this one is babilong)");
  expect_error(edited("  pairs: 50\n", "  pairs: 50\n  documents: 10\n"), 11, 14, "dataset.documents",
               "applies only to dataset.kind mdqa (this one is kv)");
}

TEST_F(ExperimentFile, PathsThatAreNotFilesSayWhatTheyAre) {
  fs::create_directories(dir_ / "models" / "tiny.gguf");
  expect_error(kValid, 5, 10, "backend.model", "is a directory, not a GGUF model file");
  fs::remove_all(dir_ / "models");
  expect_error(edited("  kind: kv\n  pairs: 50\n", "  kind: babilong\n  file: /dev/null\n"),
               10, 9, "dataset.file", "/dev/null is a character device, not a dataset file");
}

TEST_F(ExperimentFile, EndpointPortMustBeATcpPort) {
  const std::string engine = "  kind: engine\n  model: models/tiny.gguf\n  device: cpu\n  threads: 2\n";
  expect_error(edited(engine, "  kind: server\n  endpoints: [http://127.0.0.1:99999]\n"), 5, 15,
               "backend.endpoints[0]", "port '99999' is not a TCP port (1..65535)");
  expect_error(edited(engine, "  kind: server\n  endpoints: [http://127.0.0.1:0/]\n"), 5, 15,
               "backend.endpoints[0]", "port '0' is not a TCP port");
  expect_error(edited(engine, "  kind: server\n  endpoints: [http://host:80a]\n"), 5, 15,
               "backend.endpoints[0]", "port '80a' is not a TCP port");
  const Experiment ok = load(edited(engine, "  kind: server\n  endpoints: [http://127.0.0.1:65535, 'http://[::1]:8080', "
                                            "http://example.org]\n"));
  EXPECT_EQ(ok.backend.server.endpoints.size(), 3u);
}

TEST_F(ExperimentFile, DatabaseDirectoryMustExist) {
  expect_error(std::string(kValid) + "storage: {db: no/such/dir/r.db}\n", 27, 15, "storage.db",
               "no/such/dir does not exist");
  fs::create_directories(dir_ / "r.db");
  expect_error(std::string(kValid) + "storage: {db: r.db}\n", 27, 15, "storage.db",
               "is a directory, not a results database file");
}

TEST_F(ExperimentFile, DeepNestingNamesTheLineAndTheLimit) {
  std::string text = "name: x\nseed: ";
  for (int i = 0; i < 3000; ++i) text += "[";
  const fs::path file = write(text + "\n");
  try {
    load_experiment(file);
    FAIL() << "no error";
  } catch (const ConfigError& error) {
    // yaml-cpp's scanner has read to the end of the brackets when it stops.
    EXPECT_GE(error.line(), 2) << error.what();
    EXPECT_NE(error.reason().find("YAML nesting reached"), std::string::npos) << error.what();
    EXPECT_NE(error.reason().find("the parser's limit"), std::string::npos) << error.what();
    EXPECT_EQ(error.reason().find("bad file"), std::string::npos) << error.what();
  }
}

TEST_F(ExperimentFile, ServerTokenFileResolvesAndMustBeAFile) {
  const std::string engine = "  kind: engine\n  model: models/tiny.gguf\n  device: cpu\n  threads: 2\n";
  std::ofstream(dir_ / "token") << "abc\n";
  const Experiment e =
      load(edited(engine, "  kind: server\n  endpoints: [http://127.0.0.1:8080]\n  token_file: token\n"));
  EXPECT_EQ(e.backend.server.token_file, dir_ / "token");
  expect_error(edited(engine, "  kind: server\n  endpoints: [http://127.0.0.1:8080]\n  token_file: .\n"), 6, 15,
               "backend.token_file", "is a directory, not a token file");
}

TEST_F(ExperimentFile, YamlSyntaxErrorHasFileLineColumn) {
  const fs::path file = write("name: x\nbackend: {kind: engine\nseed: 3\n");
  try {
    load_experiment(file);
    FAIL() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.file(), file);
    EXPECT_GT(error.line(), 0);
    EXPECT_GT(error.column(), 0);
    EXPECT_EQ(error.key_path(), "");
    EXPECT_NE(error.reason().find("YAML syntax error"), std::string::npos) << error.what();
  }
  expect_error("name: x\n  bad: indentation\n", 2, 6, "", "YAML syntax error");
}

TEST_F(ExperimentFile, SecondYamlDocumentIsRejected) {
  expect_error(std::string(kValid) + "---\nname: other\n", 28, 1, "", "holds 2 YAML documents");
}

TEST_F(ExperimentFile, DuplicateKeyIsRejected) {
  expect_error(edited("seed: 1234", "seed: 1234\nseed: 5"), 3, 1, "seed", "duplicate key 'seed'");
}

TEST_F(ExperimentFile, MissingOrEmptyFile) {
  try {
    load_experiment(dir_ / "absent.yaml");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.line(), 0);
    EXPECT_EQ(std::string(error.what()),
              (dir_ / "absent.yaml").string() + ": cannot read the experiment file");
  }
  EXPECT_THROW(load_experiment(dir_), ConfigError);
  expect_error("", 1, 1, "", "the experiment file is empty");
}

TEST_F(ExperimentFile, MethodGenesTakeRangesAndDefaultToThePaper) {
  const Experiment e = load(edited("  kind: lpes\n", R"(  kind: mspoe
  mspoe:
    genes:
      min_ratio: {min: 1.0, max: 1.6, step: 0.1}
      max_ratio: {min: 1.6, max: 2.4, step: 0.2, start: 2.0}
      order: {values: [awareness, sequential]}
      first_layer: 3
)"));
  const MethodGenes* genes = e.objective.genes_of("mspoe");
  ASSERT_NE(genes, nullptr);
  EXPECT_EQ(genes->gene("min_ratio").start, GeneValue(1.2));  // paper default as start
  EXPECT_FALSE(genes->gene("min_ratio").fixed());
  EXPECT_EQ(genes->gene("max_ratio").start, GeneValue(2.0));
  EXPECT_EQ(genes->gene("order").values.size(), 2u);
  EXPECT_EQ(genes->gene("order").start, GeneValue(std::string("awareness")));
  EXPECT_TRUE(genes->gene("first_layer").fixed());
  EXPECT_EQ(genes->gene("alpha").start, GeneValue(3.0));  // absent: fixed at the paper value
  EXPECT_TRUE(genes->gene("alpha").fixed());
  EXPECT_EQ(e.objective.genes_of("siw"), nullptr);
}

TEST_F(ExperimentFile, MethodGeneErrors) {
  // The genes start on line 19: kind on 16, mspoe on 17, genes on 18.
  const auto mspoe = [](const std::string& gene) {
    return edited("  kind: lpes\n", "  kind: mspoe\n  mspoe:\n    genes:\n" + gene);
  };
  expect_error(mspoe("      min_ration: 1.2\n"), 19, 7, "objective.mspoe.genes.min_ration",
               "did you mean 'min_ratio'?");
  expect_error(mspoe("      min_ratio: {min: 1.3, max: 1.6, step: 0.1}\n"), 19, 18,
               "objective.mspoe.genes.min_ratio.start",
               "the paper default 1.2 is outside [1.3, 1.6]: set start");
  expect_error(mspoe("      min_ratio: {min: 1.0, max: 1.5, step: 0.2}\n"), 19, 45,
               "objective.mspoe.genes.min_ratio.step", "must be a multiple of step");
  expect_error(mspoe("      min_ratio: {min: 1.0, max: 1.6, step: 0.2, start: 1.1}\n"), 19, 57,
               "objective.mspoe.genes.min_ratio.start", "1.1 is not on the grid");
  expect_error(mspoe("      order: {values: [awareness, sideways]}\n"), 19, 35,
               "objective.mspoe.genes.order.values[1]", "must be one of awareness");
  expect_error(mspoe("      first_layer: {min: 1, max: 4, step: 0.5}\n"), 19, 43,
               "objective.mspoe.genes.first_layer.step", "expected an integer");
  // max_ratio is absent (paper 1.8), so the message points at the genes.
  expect_error(mspoe("      min_ratio: 2.0\n"), 19, 7, "objective.mspoe.genes.max_ratio",
               "min_ratio must not exceed max_ratio");
  // SIW's paper gives no layer range: the file must set it. The objective
  // section's mark is its first key (line 16).
  expect_error(edited("  kind: lpes\n", "  kind: siw\n"), 16, 3, "objective.siw.genes.first_layer",
               "gives no default");
}

TEST_F(ExperimentFile, ComboNeedsTwoDistinctMethods) {
  const auto combo = [](const std::string& methods) {
    return edited("  kind: lpes\n", "  kind: combo\n  combo: {methods: " + methods + "}\n");
  };
  const Experiment e = load(combo("[lpes, mspoe]"));
  EXPECT_EQ(e.objective.methods(), (std::vector<std::string>{"lpes", "mspoe"}));
  ASSERT_NE(e.objective.genes_of("mspoe"), nullptr);
  expect_error(combo("[lpes]"), 17, 20, "objective.combo.methods", "at least 2 items");
  expect_error(combo("[lpes, pi]"), 17, 27, "objective.combo.methods[1]", "combine only one");
  expect_error(combo("[siw, siw]"), 17, 26, "objective.combo.methods[1]", "listed twice");
  expect_error(combo("[selfextend, string]"), 17, 33, "objective.combo.methods[1]",
               "cannot combine: each remaps the attention's distances");
  expect_error(edited("  kind: lpes\n", "  kind: lpes\n  combo: {methods: [lpes, siw]}\n"), 17, 10,
               "objective.combo", "applies only when objective.kind is combo");
}

TEST_F(ExperimentFile, GridValuesNameGenesOfTheObjective) {
  const std::string pi_grid = edited("  kind: lpes\n", "  kind: pi\n");
  const auto with_grid = [&](const std::string& values) {
    std::string text = pi_grid;
    text.replace(text.find("  strategy: ga\n"), 15, "  strategy: grid\n  grid:\n    values:\n" + values);
    return text;
  };
  const Experiment e = load(with_grid("      scale: [1.0, 1.5, 2.0]\n"));
  ASSERT_EQ(e.search.grid.size(), 1u);
  EXPECT_EQ(e.search.grid[0].gene, "scale");
  EXPECT_EQ(e.search.grid[0].values, (std::vector<GeneValue>{1.0, 1.5, 2.0}));
  expect_error(with_grid("      scael: [1.0]\n"), 25, 7, "search.grid.values.scael",
               "did you mean 'scale'?");
  expect_error(with_grid("      scale: [1.0, 1.0]\n"), 25, 20, "search.grid.values.scale[1]",
               "duplicate value 1");
  expect_error(with_grid("      scale: [big]\n"), 25, 15, "search.grid.values.scale[0]",
               "expected a number");
}

TEST_F(ExperimentFile, ScalarEdgeCases) {
  expect_error(edited("seed: 1234", "seed: -1"), 2, 7, "seed", "expected a non-negative integer");
  expect_error(edited("    parents: 12", "    parents: 12abc"), 25, 14, "search.ga.parents",
               "expected an integer, got '12abc'");
  expect_error(edited("    mutation_y: 0.2", "    mutation_y: .inf"), 26, 17, "search.ga.mutation_y",
               "expected a finite number");
  expect_error(edited("    parents: 12", "    parents: 99999999999999999999"), 25, 14,
               "search.ga.parents", "expected an integer");
  expect_error(edited("model: models/tiny.gguf", "model: ~other/tiny.gguf"), 5, 10, "backend.model",
               "only ~/ paths");
  expect_error(edited("name: quickstart", "name: {first: a}"), 1, 7, "name", "expected text, got a mapping");
  expect_error(edited("dataset:\n", "dataset: 3\ndataset_was:\n"), 9, 1, "dataset_was", "unknown key");
  expect_error(edited("  pairs: 50\n", "  pairs: 50\n  pairs: 60\n"), 11, 3, "dataset.pairs",
               "duplicate key 'pairs'");
}

TEST(NearestName, EditDistanceAndSuggestion) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("population", "population"), 0u);
  EXPECT_EQ(edit_distance("popuation", "population"), 1u);
  const std::vector<std::string> keys = {"population", "parents", "generations", "mutants"};
  EXPECT_EQ(nearest_name("popuation", keys), "population");
  EXPECT_EQ(nearest_name("parent", keys), "parents");
  EXPECT_EQ(nearest_name("zzzz", keys), "");
}

TEST_F(ExperimentFile, SearchDifferencesNameExactlyTheChangedPaths) {
  const Experiment stored = load(kValid);
  const Experiment cosmetic = load(edited("name: quickstart", "name: renamed") +
                                   "storage: {db: elsewhere.db}\n");
  EXPECT_TRUE(search_differences(stored, cosmetic).empty());
  EXPECT_EQ(stored.search_hash(), cosmetic.search_hash());

  const Experiment threads = load(edited("  threads: 2", "  threads: 8"));
  EXPECT_TRUE(search_differences(stored, threads).empty());

  const Experiment edited_search =
      load(edited("    mutation_y: 0.2", "    mutation_y: 0.3\n    generations: 5"));
  const std::vector<std::string> changes = search_differences(stored, edited_search);
  EXPECT_EQ(changes, (std::vector<std::string>{"search.ga.generations: 20 -> 5",
                                               "search.ga.mutation_y: 0.2 -> 0.3"}));
  EXPECT_NE(stored.search_hash(), edited_search.search_hash());

  const Experiment other_data =
      load(edited("  gold_positions: [0.0, 0.5, 1.0]", "  gold_positions: [0.0, 0.25, 0.5, 1.0]"));
  EXPECT_EQ(search_differences(stored, other_data),
            (std::vector<std::string>{"dataset.gold_positions: [0.0,0.5,1.0] -> [0.0,0.25,0.5,1.0]"}));

  // A strategy switch drops the ga block and adds the random one.
  const Experiment random = load(edited("  strategy: ga", "  strategy: random"));
  const std::vector<std::string> switched = search_differences(stored, random);
  ASSERT_EQ(switched.size(), 3u);
  EXPECT_EQ(switched[0].rfind("search.ga: {", 0), 0u) << switched[0];
  EXPECT_NE(switched[0].find("} -> (absent)"), std::string::npos) << switched[0];
  EXPECT_EQ(switched[1], R"(search.random: (absent) -> {"samples":64})");
  EXPECT_EQ(switched[2], R"(search.strategy: "ga" -> "random")");
}

TEST_F(ExperimentFile, UniqueChildrenIsStoredOnlyWhenOnAndOnlyForGa) {
  const Experiment plain = load(kValid);
  EXPECT_FALSE(plain.search.unique_children);
  EXPECT_FALSE(plain.search_fingerprint()["search"].contains("unique_children"))
      << "experiments stored before the key keep their fingerprint";
  const Experiment unique = load(edited("  strategy: ga", "  strategy: ga\n  unique_children: true"));
  EXPECT_TRUE(unique.search.unique_children);
  EXPECT_EQ(search_differences(plain, unique),
            (std::vector<std::string>{"search.unique_children: (absent) -> true"}));
  EXPECT_EQ(parse_experiment(unique.text, unique.file).search, unique.search);
  expect_error(edited("  strategy: ga", "  strategy: random\n  unique_children: true"), 23, 20,
               "search.unique_children", "applies to strategies ga and nsga2");
  expect_error(edited("  strategy: ga", "  strategy: ga\n  unique_children: maybe"), 23, 20,
               "search.unique_children", "true");
}

TEST_F(ExperimentFile, HeldoutSamplesTakeOneCountPerGoldPosition) {
  const Experiment plain = load(kValid);
  EXPECT_TRUE(plain.dataset.heldout_per_position.empty());
  const Experiment uneven = load(edited("  heldout_samples: 50", "  heldout_samples: [40, 100, 40]"));
  EXPECT_EQ(uneven.dataset.heldout_per_position, (std::vector<int>{40, 100, 40}));
  EXPECT_EQ(uneven.dataset.heldout_samples, 100);
  EXPECT_EQ(uneven.to_json()["dataset"]["heldout_samples"], nlohmann::json({40, 100, 40}));
  EXPECT_EQ(load(uneven.to_json().dump(2)).dataset, uneven.dataset) << "the stored JSON loads back";
  // Equal counts are the one-number form: the same experiment.
  const Experiment equal = load(edited("  heldout_samples: 50", "  heldout_samples: [50, 50, 50]"));
  EXPECT_EQ(equal.dataset, plain.dataset);
  EXPECT_EQ(equal.to_json(), plain.to_json());
  expect_error(edited("  heldout_samples: 50", "  heldout_samples: [40, 100]"), 13, 20, "dataset.heldout_samples",
               "2 counts for 3 gold positions");
  expect_error(edited("  heldout_samples: 50", "  heldout_samples: [40, 0, 40]"), 13, 25,
               "dataset.heldout_samples[1]", "must be in [1, 1000000]");
}

TEST_F(ExperimentFile, PatienceIsStoredOnlyWhenSet) {
  const Experiment plain = load(kValid);
  EXPECT_EQ(plain.search.ga.patience, 0);
  EXPECT_FALSE(plain.search_fingerprint()["search"]["ga"].contains("patience"))
      << "experiments stored before the key keep their fingerprint";
  const Experiment patient = load(edited("    parents: 12", "    parents: 12\n    patience: 3"));
  EXPECT_EQ(patient.search.ga.patience, 3);
  EXPECT_EQ(search_differences(plain, patient), (std::vector<std::string>{"search.ga.patience: (absent) -> 3"}));
  expect_error(edited("    parents: 12", "    parents: 12\n    patience: 21"), 26, 15, "search.ga.patience",
               "20");
  expect_error(edited("    parents: 12", "    parents: 12\n    patience: -1"), 26, 15, "search.ga.patience", "0");
}

TEST_F(ExperimentFile, RacingIsStoredOnlyWhenSetAndOnlyWhereAParentCutOffExists) {
  const Experiment plain = load(kValid);
  EXPECT_FALSE(plain.search.racing);
  EXPECT_FALSE(plain.search_fingerprint()["search"].contains("racing"))
      << "experiments stored before the key keep their fingerprint";
  const Experiment raced = load(edited("  strategy: ga", "  strategy: ga\n  racing: {first: 4, step: 2}"));
  ASSERT_TRUE(raced.search.racing);
  EXPECT_EQ(raced.search.racing->first, 4);
  EXPECT_EQ(raced.search.racing->step, 2);
  EXPECT_EQ(raced.search.racing->confidence, 0.95);
  EXPECT_EQ(search_differences(plain, raced),
            (std::vector<std::string>{R"(search.racing: (absent) -> {"confidence":0.95,"first":4,"step":2})"}));
  EXPECT_EQ(raced.to_json()["search"]["racing"]["first"], 4) << "ga-run validate prints it";
  EXPECT_EQ(parse_experiment(raced.text, raced.file).search, raced.search);
  const auto racing = [](const std::string& section) {
    return edited("  strategy: ga", "  strategy: ga\n  racing: " + section);
  };
  expect_error(racing("{first: 0, step: 2}"), 23, 19, "search.racing.first", "1");
  expect_error(racing("{first: 20, step: 2}"), 23, 19, "search.racing.first", "below dataset.search_samples (20)");
  expect_error(racing("{first: 4, step: 0}"), 23, 28, "search.racing.step", "1");
  expect_error(racing("{first: 4}"), 23, 11, "search.racing.step", "missing");
  expect_error(racing("{first: 4, step: 2, confidence: 0.5}"), 23, 43, "search.racing.confidence",
               "strictly between 0.5 and 1");
  expect_error(racing("{first: 4, step: 2, confidence: 1}"), 23, 43, "search.racing.confidence",
               "strictly between 0.5 and 1");
  expect_error(racing("{first: 4, step: 2, confdence: 0.9}"), 23, 31, "search.racing.confdence",
               "did you mean 'confidence'?");
  expect_error(edited("  strategy: ga", "  strategy: random\n  racing: {first: 4, step: 2}"), 23, 11,
               "search.racing", "applies to strategy ga only");
  expect_error(edited("    mutation_y: 0.2", "    mutation_y: 0.2\n    selection: tournament\n  racing: {first: 4, step: 2}"),
               28, 11, "search.racing", "selection: truncation");
  expect_error(edited("    mutation_y: 0.2", "    mutation_y: 0.2\n    elitism: 2\n  racing: {first: 4, step: 2}"), 28,
               11, "search.racing", "elitism: 0");
}

TEST_F(ExperimentFile, FitnessKindIsStoredOnlyWhenNotAccuracyAndNeedsTeacherForcing) {
  const Experiment plain = load(kValid);
  EXPECT_EQ(plain.objective.fitness, "accuracy");
  EXPECT_FALSE(plain.search_fingerprint()["objective"].contains("fitness"));
  const Experiment blend = load(edited("  kind: lpes\n", "  kind: lpes\n  fitness: blend\n"));
  EXPECT_EQ(blend.objective.fitness, "blend");
  EXPECT_EQ(search_differences(plain, blend),
            (std::vector<std::string>{R"(objective.fitness: (absent) -> "blend")"}));
  EXPECT_EQ(parse_experiment(blend.text, blend.file).objective, blend.objective);
  expect_error(edited("  kind: lpes\n", "  kind: lpes\n  fitness: loss\n"), 17, 12, "objective.fitness",
               "gold_logprob");
  std::string generated = edited("  kind: lpes\n", "  kind: lpes\n  fitness: gold_logprob\n");
  generated.replace(generated.find("metric: teacher_forced"), 22, "metric: generate");
  expect_error(generated, 17, 12, "objective.fitness", "dataset.metric is generate");
}

TEST_F(ExperimentFile, Nsga2TakesTwoOrThreeObjectives) {
  const Experiment pareto = load(edited("  strategy: ga", "  strategy: nsga2\n  objectives: [accuracy_middle, neg_gap]\n"
                                                       "  nsga2: {population: 8, generations: 3}"));
  EXPECT_EQ(pareto.search.strategy, "nsga2");
  EXPECT_EQ(pareto.search.objectives, (std::vector<std::string>{"accuracy_middle", "neg_gap"}));
  EXPECT_EQ(pareto.search.nsga2.population, 8);
  EXPECT_EQ(pareto.search.nsga2.mutation, "polynomial");
  const nlohmann::json fingerprint = pareto.search_fingerprint()["search"];
  EXPECT_EQ(fingerprint["objectives"], nlohmann::json({"accuracy_middle", "neg_gap"}));
  EXPECT_EQ(fingerprint["nsga2"]["generations"], 3);
  EXPECT_FALSE(fingerprint.contains("ga"));
  EXPECT_FALSE(load(kValid).search_fingerprint()["search"].contains("nsga2")) << "other strategies unchanged";
  EXPECT_EQ(parse_experiment(pareto.text, pareto.file).search, pareto.search);

  expect_error(edited("  strategy: ga", "  strategy: nsga2\n  objectives: [accuracy_middle]"), 23, 15,
               "search.objectives", "at least 2");
  expect_error(edited("  strategy: ga", "  strategy: nsga2\n  objectives: [neg_gap, middle]"), 23, 25,
               "search.objectives[1]", "accuracy_middle");
  expect_error(edited("  strategy: ga", "  strategy: nsga2\n  objectives: [neg_gap, neg_gap]"), 23, 25,
               "search.objectives[1]", "listed twice");
  const Experiment ga = load(edited("  strategy: ga", "  strategy: ga\n  objectives: [neg_gap, accuracy_end]"));
  EXPECT_FALSE(ga.search_fingerprint()["search"].contains("objectives")) << "read by nsga2 only";
  EXPECT_TRUE(search_differences(load(kValid), ga).empty());
  expect_error(edited("  strategy: ga", "  strategy: nsga2"), 22, 3, "search.objectives", "missing");
  std::string generated = edited("  strategy: ga", "  strategy: nsga2\n  objectives: [neg_gap, logprob_end]");
  generated.replace(generated.find("metric: teacher_forced"), 22, "metric: generate");
  expect_error(generated, 23, 25, "search.objectives[1]", "dataset.metric is generate");
}

}  // namespace
}  // namespace midtune
