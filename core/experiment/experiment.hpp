// The experiment file (experiments/README.md is the format contract): parsed
// and validated into typed sections, with defaults filled in. Every problem
// throws ConfigError naming file:line:col, the key path and the reason.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/experiment/config_error.hpp"
#include "core/experiment/genes.hpp"

namespace midtune {

struct ServerEndpointsConfig {
  std::vector<std::string> endpoints;  // http(s)://host:port, at least one
  double timeout_s = 120.0;
  int retries = 3;
  // File holding the bearer token of servers started with --token-file
  // (empty: the MIDTUNE_SERVER_TOKEN environment variable, if set).
  std::filesystem::path token_file;
  bool operator==(const ServerEndpointsConfig&) const = default;
};

struct SyntheticConfig {  // tests and benchmarks only
  int layers = 30;
  int heads = 9;
  double noise = 0.05;
  double latency_ms = 0.0;
  double prompt_latency_ms = 0.0;  // a sleep per prompt, as a model's cost (benchmarks)
  bool operator==(const SyntheticConfig&) const = default;
};

struct BackendConfig {
  std::string kind;              // engine | server | synthetic-test-double
  std::filesystem::path model;   // engine: absolute, ~ and relative paths resolved
  std::string device = "cpu";    // engine: cpu | cuda
  int threads = 0;               // engine: 0 = all cores
  int gpu = 0;                   // engine, device cuda: which GPU (ga-run devices lists them)
  int batch_tokens = 0;          // engine, device cuda: tokens per pass, 0 = from the free GPU memory
  // engine: native | fp32 (device cpu: EngineOptions::fp32) | file (device
  // cuda: weights kept in their GGUF blocks, devices::WeightForm::file)
  std::string precision = "native";
  // engine, device cuda: fp32 | bf16 (keys and values stored in bf16: half
  // the cache memory, other numbers, so another model identity)
  std::string kv_cache = "fp32";
  // engine, device cuda: the prefill attention body, flash | gemm; empty =
  // the device's default (flash, or MIDTUNE_CUDA_ATTENTION). The body is in
  // the model identity, so it needs no place in the search fingerprint.
  std::string attention;
  ServerEndpointsConfig server;  // kind server
  SyntheticConfig synthetic;     // kind synthetic-test-double
  bool operator==(const BackendConfig&) const = default;
};

struct DatasetConfig {
  std::string kind;                           // kv | mdqa | babilong
  std::optional<std::filesystem::path> file;  // absolute; nullopt = generate (kv only)
  int pairs = 50;                             // kv: key/value pairs per prompt
  int documents = 0;                          // mdqa: documents per prompt, 0 = as in the file
  std::string distractors = "file";           // mdqa: file | other-questions
  std::vector<double> gold_positions = {0.0, 0.5, 1.0};  // in [0,1], strictly increasing
  int search_samples = 20;                    // per gold position
  int heldout_samples = 50;                   // per gold position, disjoint from search
  // Held-out items per gold position where they differ (the YAML list form):
  // one count per position, the largest equal to heldout_samples. Empty =
  // heldout_samples everywhere.
  std::vector<int> heldout_per_position;
  std::string metric = "teacher_forced";      // teacher_forced | generate
  int max_new_tokens = 100;
  // kv / babilong: write the start of the answer into the model's turn
  // (datasets SliceSpec::prime_answer); false = the papers' exact protocol.
  bool prime_answer = false;
  // Chunks per prompt for the dataset reader: kv pairs, mdqa documents
  // (0 = as in the file), 0 for babilong (its sentences are the chunks).
  int chunks() const;
  bool operator==(const DatasetConfig&) const = default;
};

// LPES fitness lambdas (beginning / middle / end buckets), >= 0, sum 1.
struct FitnessWeights {
  double beginning = 0.2;
  double middle = 0.3;
  double end = 0.5;
  bool operator==(const FitnessWeights&) const = default;
};

struct LpesConfig {
  std::string curve = "bezier";  // bezier | linear | step | brute-force
  int degree = 3;                // D, 1..6
  int x_step = 1;
  double y_min = 1.0;
  double y_max = 2.0;
  double y_step = 0.1;
  bool operator==(const LpesConfig&) const = default;
};

struct PiConfig {
  double min = 1.0;
  double max = 2.0;
  double step = 0.1;
  bool operator==(const PiConfig&) const = default;
};

struct ObjectiveConfig {
  std::string kind;  // lpes | pi | mspoe | siw | caliope | phs | combo
  FitnessWeights weights;
  // What the search maximises (core/search/fitness.hpp): accuracy |
  // gold_logprob | blend; the log-probability kinds need teacher forcing.
  std::string fitness = "accuracy";
  LpesConfig lpes;
  PiConfig pi;
  // Gene tables of mspoe / siw / caliope / phs: every method the objective
  // uses (kind, or a combo member) and any other the file sets.
  std::vector<MethodGenes> method_genes;
  std::vector<std::string> combo;  // kind combo: the methods combined (>= 2, no repeats)

  // The methods whose genes form the genome, in genome order.
  std::vector<std::string> methods() const;
  // nullptr when the method has no gene table here.
  const MethodGenes* genes_of(const std::string& method) const;
  bool operator==(const ObjectiveConfig&) const = default;
};

struct GaConfig {  // LPES Algorithm 1, Table 12 defaults
  int population = 32;   // N_ps
  int parents = 12;      // N_pa
  int generations = 20;  // T
  int mutants = 16;      // N_mu
  int crossovers = 4;    // N_cr
  int crossover_tries = 4;  // N_ct
  int mutation_x = 2;       // M_x
  double mutation_y = 0.2;  // M_y
  std::string mutation = "lpes";        // lpes | uniform | gaussian | polynomial
  std::string crossover = "one-point";  // one-point | uniform | sbx
  std::string selection = "truncation"; // truncation | tournament
  int tournament_size = 3;
  int elitism = 0;
  int patience = 0;  // stop after this many generations without a new best (0: run all)
  bool operator==(const GaConfig&) const = default;
};

struct GridAxis {
  std::string gene;  // a gene name of the objective (combo: method.gene)
  std::vector<GeneValue> values;
  bool operator==(const GridAxis&) const = default;
};

struct Nsga2SearchConfig {  // NSGA-II (Deb et al. 2002)
  int population = 24;
  int generations = 10;                 // offspring generations after the initial one
  std::string mutation = "polynomial";  // polynomial | gaussian | uniform
  std::string crossover = "sbx";        // sbx | one-point | uniform
  int crossover_tries = 4;
  bool operator==(const Nsga2SearchConfig&) const = default;
};

// search.racing (ga with truncation selection and the whole parent pool
// carried): children are scored on growing slices of the search split and
// dropped once paired bounds say they cannot become parents
// (core/search/racing.hpp).
struct RacingConfig {
  int first = 0;             // items per gold position in the first slice, >= 1, < search_samples
  int step = 0;              // items per gold position each later slice adds, >= 1
  double confidence = 0.95;  // in (0.5, 1): one minus the chance of wrongly dropping a child
  bool operator==(const RacingConfig&) const = default;
};

struct SearchConfig {
  std::string strategy = "ga";  // ga | grid | random | nsga2
  GaConfig ga;
  Nsga2SearchConfig nsga2;
  // nsga2: the two or three objectives maximised (search_objectives()).
  std::vector<std::string> objectives;
  std::vector<GridAxis> grid;   // search.grid.values, sorted by gene name
  int random_samples = 64;      // search.random.samples
  // ga, nsga2: a child whose decoded intervention this experiment evaluated before
  // (or that repeats one in its generation) is redrawn, so each generation
  // evaluates its configured number of new candidates.
  bool unique_children = false;
  std::optional<RacingConfig> racing;  // absent: every candidate gets the whole split
  bool operator==(const SearchConfig&) const = default;
};

struct StorageConfig {
  std::filesystem::path db;  // absolute; default results.db beside the file
  bool operator==(const StorageConfig&) const = default;
};

struct Experiment {
  std::filesystem::path file;  // absolute path of the experiment file
  std::string text;            // the file's text as read (stored with the results)
  std::string name;
  std::uint64_t seed = 0;
  BackendConfig backend;
  DatasetConfig dataset;
  ObjectiveConfig objective;
  SearchConfig search;
  StorageConfig storage;

  // The whole validated experiment, defaults filled in (not `file`/`text`).
  nlohmann::json to_json() const;
  // The parts that change what the search does and finds: seed, backend kind
  // and model identity (model file name, device; synthetic layers/heads/
  // noise), dataset (file by name), objective (only the methods in use), and
  // search (only the active strategy). Not: name, storage, threads, server
  // endpoints/timeouts/retries, synthetic latency, absolute paths.
  nlohmann::json search_fingerprint() const;
  // 16 hex digits (FNV-1a) of the fingerprint's canonical dump.
  std::string search_hash() const;
};

// Reads, parses and validates an experiment file.
Experiment load_experiment(const std::filesystem::path& file);
// The same from text already read (e.g. the copy stored in the results
// database); `file` names it in messages and anchors relative paths.
Experiment parse_experiment(const std::string& text, const std::filesystem::path& file);
// The file's engine moved to another device (cpu | cuda), for `ga-run eval
// --device`: the same items on the device a machine has. The other device's
// own settings (gpu, batch_tokens, attention) are dropped; a precision the
// new device lacks, or a backend that is not the engine, is a ConfigError
// naming backend.device of the file.
void move_to_device(Experiment& experiment, const std::string& device);

// One line per changed key path, "search.ga.mutation_y: 0.2 -> 0.3"
// ("(absent)" for a key on one side only), sorted by path; empty when the
// search is the same.
std::vector<std::string> search_differences(const Experiment& stored, const Experiment& now);
std::vector<std::string> search_differences(const nlohmann::json& stored_fingerprint,
                                            const nlohmann::json& now_fingerprint);

// Names for messages and CLI help.
const std::vector<std::string>& backend_kinds();
const std::vector<std::string>& dataset_kinds();
const std::vector<std::string>& objective_kinds();
const std::vector<std::string>& search_strategies();
// search.objectives names (core/search/fitness.hpp defines each).
const std::vector<std::string>& search_objectives();

}  // namespace midtune
