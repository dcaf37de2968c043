// load_experiment / parse_experiment and the backend, dataset and storage
// sections. Objective and search live in objective_load.cpp / search_load.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include "core/experiment/experiment.hpp"
#include "core/experiment/experiment_name.hpp"
#include "core/experiment/load_sections.hpp"
#include "core/experiment/nearest_name.hpp"
#include "methods/registry.hpp"

namespace midtune {
namespace load {
namespace {

const std::vector<std::string> kEngineKeys = {"model",     "device",   "gpu",      "threads", "batch_tokens",
                                              "precision", "kv_cache", "attention"};
const std::vector<std::string> kServerKeys = {"endpoints", "timeout_s", "retries", "token_file"};
const std::vector<std::string> kSyntheticKeys = {"layers", "heads", "noise", "latency_ms", "prompt_latency_ms"};

void reject_keys_of_other_kind(const MapReader& section, const std::vector<std::string>& keys,
                               const std::string& owner_kind, const std::string& kind) {
  for (const auto& key : keys) {
    section.reject_if_present(key, "applies only to " + section.path() + ".kind " + owner_kind +
                                       " (this one is " + kind + ")");
  }
}

std::string endpoint_url(const Field& field) {
  const std::string url = field.text();
  const bool http = url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
  if (!http || url.find_first_of(" \t") != std::string::npos) {
    field.fail("'" + url + "' is not an endpoint URL: expected http://host:port");
  }
  // The port, if given, is the digits after the last ':' of the authority
  // (after a closing ']' for an IPv6 literal).
  const std::size_t host_begin = url.find("//") + 2;
  const std::string authority = url.substr(host_begin, url.find('/', host_begin) - host_begin);
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string::npos && (authority.find(']') == std::string::npos || colon > authority.find(']'))) {
    const std::string port = authority.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 6 && port.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535)
      field.fail("'" + url + "': port '" + port + "' is not a TCP port (1..65535)");
  }
  return url;
}

// A path that exists but is not a regular file (a directory, a device, a
// socket) is named for what it is: "not found" would send the user looking
// for a missing file.
void require_regular_if_present(const Field& field, const std::filesystem::path& path, const std::string& wanted) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status) || std::filesystem::is_regular_file(status)) return;
  const char* kind = std::filesystem::is_directory(status)       ? "a directory"
                     : std::filesystem::is_character_file(status) ? "a character device"
                     : std::filesystem::is_block_file(status)     ? "a block device"
                     : std::filesystem::is_fifo(status)           ? "a named pipe"
                     : std::filesystem::is_socket(status)         ? "a socket"
                                                                  : "not a regular file";
  field.fail(path.string() + " is " + kind + ", not " + wanted);
}

// The engine's devices, and why a precision does not fit one ("" when it
// does): the file's backend section and `--device` obey the same rule.
const std::vector<std::string> kEngineDevices = {"cpu", "cuda"};
std::string precision_device_problem(const std::string& precision, const std::string& device) {
  if (device == "cuda" && precision == "fp32") return "fp32 applies to device: cpu only (the GPU engine runs bf16)";
  if (device != "cuda" && precision == "file")
    return "file applies to device: cuda only (the CPU engine always multiplies the file's own blocks: that is "
           "native)";
  return "";
}

}  // namespace

std::filesystem::path resolve_path(const Field& field, const std::filesystem::path& base_dir) {
  std::string text = field.text();
  if (text.empty()) field.fail("expected a path, got empty text");
  if (text[0] == '~') {
    if (text.size() > 1 && text[1] != '/') field.fail("only ~/ paths are supported, not ~user");
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0') field.fail("cannot expand ~: HOME is not set");
    text = std::string(home) + text.substr(1);
  }
  std::filesystem::path path(text);
  if (path.is_relative()) path = base_dir / path;
  return path.lexically_normal();
}

BackendConfig parse_backend(const MapReader& root, const std::filesystem::path& base_dir) {
  std::vector<std::string> valid = {"kind"};
  for (const auto* keys : {&kEngineKeys, &kServerKeys, &kSyntheticKeys}) {
    valid.insert(valid.end(), keys->begin(), keys->end());
  }
  if (!root.has("backend")) root.required("backend");
  const MapReader section = root.map("backend", valid);
  BackendConfig backend;
  backend.kind = section.required("kind").choice(backend_kinds());
  if (backend.kind != "engine") reject_keys_of_other_kind(section, kEngineKeys, "engine", backend.kind);
  if (backend.kind != "server") reject_keys_of_other_kind(section, kServerKeys, "server", backend.kind);
  if (backend.kind != "synthetic-test-double") {
    reject_keys_of_other_kind(section, kSyntheticKeys, "synthetic-test-double", backend.kind);
  }
  if (backend.kind == "engine") {
    backend.model = resolve_path(section.required("model"), base_dir);
    require_regular_if_present(section.field("model"), backend.model, "a GGUF model file");
    backend.device = section.choice_or("device", backend.device, kEngineDevices);
    backend.threads = static_cast<int>(section.integer_or("threads", backend.threads, 0, 4096));
    backend.gpu = static_cast<int>(section.integer_or("gpu", backend.gpu, 0, 1023));
    backend.batch_tokens = static_cast<int>(section.integer_or("batch_tokens", backend.batch_tokens, 0, 1 << 24));
    backend.precision = section.choice_or("precision", backend.precision, {"native", "fp32", "file"});
    if (const std::string problem = precision_device_problem(backend.precision, backend.device); !problem.empty())
      section.field("precision").fail(problem);
    backend.kv_cache = section.choice_or("kv_cache", backend.kv_cache, {"fp32", "bf16"});
    backend.attention = section.choice_or("attention", backend.attention, {"flash", "gemm", "cudnn"});
    if (backend.device != "cuda") {
      for (const char* key : {"gpu", "batch_tokens", "attention"}) {
        if (section.has(key)) {
          section.field(key).fail("applies to device: cuda only");
        }
      }
    }
  } else if (backend.kind == "server") {
    for (const auto& item : section.required("endpoints").list_of_min_size(1)) {
      backend.server.endpoints.push_back(endpoint_url(item));
    }
    backend.server.timeout_s = section.number_or("timeout_s", backend.server.timeout_s, 0.001, 86400);
    backend.server.retries = static_cast<int>(section.integer_or("retries", backend.server.retries, 0, 100));
    if (section.has("token_file")) {
      backend.server.token_file = resolve_path(section.field("token_file"), base_dir);
      require_regular_if_present(section.field("token_file"), backend.server.token_file, "a token file");
    }
  } else {
    SyntheticConfig& synthetic = backend.synthetic;
    synthetic.layers = static_cast<int>(section.integer_or("layers", synthetic.layers, 1, 1024));
    synthetic.heads = static_cast<int>(section.integer_or("heads", synthetic.heads, 1, 1024));
    synthetic.noise = section.number_or("noise", synthetic.noise, 0, 1);
    synthetic.latency_ms = section.number_or("latency_ms", synthetic.latency_ms, 0, 3.6e6);
    synthetic.prompt_latency_ms = section.number_or("prompt_latency_ms", synthetic.prompt_latency_ms, 0, 3.6e6);
  }
  return backend;
}

DatasetConfig parse_dataset(const MapReader& root, const std::filesystem::path& base_dir) {
  if (!root.has("dataset")) root.required("dataset");
  const MapReader section =
      root.map("dataset", {"kind", "file", "pairs", "documents", "distractors", "gold_positions",
                           "search_samples", "heldout_samples", "metric", "max_new_tokens", "prime_answer"});
  DatasetConfig dataset;
  dataset.kind = section.required("kind").choice(dataset_kinds());
  if (section.has("file")) {
    dataset.file = resolve_path(section.field("file"), base_dir);
    require_regular_if_present(section.field("file"), *dataset.file, "a dataset file");
  } else if (dataset.kind != "kv") {
    section.field("file").fail("dataset.kind " + dataset.kind +
                                  " needs a file (only kv data can be generated)");
  }
  const std::string other_kind = " (this one is " + dataset.kind + ")";
  if (dataset.kind == "kv") {
    dataset.pairs = static_cast<int>(section.integer_or("pairs", dataset.pairs, 1, 100000));
  } else {
    section.reject_if_present("pairs", "applies only to dataset.kind kv" + other_kind);
  }
  if (dataset.kind == "mdqa") {
    dataset.documents = static_cast<int>(section.integer_or("documents", dataset.documents, 0, 100000));
    dataset.distractors = section.choice_or("distractors", dataset.distractors, {"file", "other-questions"});
  } else {
    for (const char* key : {"documents", "distractors"}) {
      section.reject_if_present(key, "applies only to dataset.kind mdqa" + other_kind);
    }
  }
  if (section.has("gold_positions")) {
    dataset.gold_positions.clear();
    for (const auto& item : section.field("gold_positions").list_of_min_size(2)) {
      const double position = item.number_in(0.0, 1.0);
      if (!dataset.gold_positions.empty() && position <= dataset.gold_positions.back()) {
        std::ostringstream reason;
        reason << position << " must be greater than the position before it ("
               << dataset.gold_positions.back() << "): gold_positions must be increasing";
        item.fail(reason.str());
      }
      dataset.gold_positions.push_back(position);
    }
  }
  dataset.search_samples =
      static_cast<int>(section.integer_or("search_samples", dataset.search_samples, 1, 1000000));
  if (section.has("heldout_samples") && section.field("heldout_samples").is_sequence()) {
    // One count per gold position: many items where the verdict matters
    // (the middle), fewer at the ends.
    const auto counts = section.field("heldout_samples").list();
    if (counts.size() != dataset.gold_positions.size()) {
      section.field("heldout_samples")
          .fail(std::to_string(counts.size()) + " counts for " + std::to_string(dataset.gold_positions.size()) +
                " gold positions: give one count per position, or one number for all");
    }
    for (const auto& count : counts) dataset.heldout_per_position.push_back(static_cast<int>(count.integer_in(1, 1000000)));
    dataset.heldout_samples = *std::max_element(dataset.heldout_per_position.begin(), dataset.heldout_per_position.end());
    // Equal counts are the one-number form (the same slice and fingerprint).
    if (std::all_of(dataset.heldout_per_position.begin(), dataset.heldout_per_position.end(),
                    [&](int c) { return c == dataset.heldout_samples; })) {
      dataset.heldout_per_position.clear();
    }
  } else {
    dataset.heldout_samples =
        static_cast<int>(section.integer_or("heldout_samples", dataset.heldout_samples, 1, 1000000));
  }
  dataset.metric = section.choice_or("metric", dataset.metric, {"teacher_forced", "generate"});
  dataset.max_new_tokens =
      static_cast<int>(section.integer_or("max_new_tokens", dataset.max_new_tokens, 1, 4096));
  dataset.prime_answer = section.choice_or("prime_answer", "false", {"true", "false"}) == "true";
  return dataset;
}

}  // namespace load

int DatasetConfig::chunks() const {
  if (kind == "kv") return pairs;
  if (kind == "mdqa") return documents;
  return 0;
}

namespace {

YAML::Node parse_yaml(const std::string& text, const std::filesystem::path& file) {
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(text);
    if (documents.size() > 1) {
      const YAML::Mark second = documents[1].Mark();
      throw ConfigError(file, second.line + 1, second.column + 1, "",
                        "the file holds " + std::to_string(documents.size()) +
                            " YAML documents; an experiment is one");
    }
    return documents.empty() ? YAML::Node() : documents.front();
  } catch (const YAML::DeepRecursion& error) {
    throw ConfigError(file, error.mark.line + 1, error.mark.column + 1, "",
                      "YAML nesting reached " + std::to_string(error.depth()) +
                          " levels, the parser's limit (an experiment nests a handful)");
  } catch (const YAML::ParserException& error) {
    throw ConfigError(file, error.mark.line + 1, error.mark.column + 1, "",
                      "YAML syntax error: " + error.msg);
  }
}

}  // namespace

Experiment parse_experiment(const std::string& text, const std::filesystem::path& file) {
  using load::Field;
  using load::MapReader;
  Experiment experiment;
  experiment.file = std::filesystem::absolute(file).lexically_normal();
  experiment.text = text;
  const std::filesystem::path base_dir = experiment.file.parent_path();

  const YAML::Node document = parse_yaml(text, experiment.file);
  const Field top(&experiment.file, document, "", YAML::Mark());
  if (top.is_null()) top.fail("the experiment file is empty");
  const MapReader root(top, {"name", "seed", "backend", "dataset", "objective", "search", "storage"});

  experiment.name = root.required("name").text();
  if (const std::string problem = experiment_name_problem(experiment.name); !problem.empty())
    root.field("name").fail(problem);
  if (root.has("seed")) experiment.seed = root.field("seed").unsigned_integer();
  experiment.backend = load::parse_backend(root, base_dir);
  experiment.dataset = load::parse_dataset(root, base_dir);
  experiment.objective = load::parse_objective(root, experiment.dataset);
  experiment.search = load::parse_search(root, experiment.objective, experiment.dataset);

  const MapReader storage = root.map("storage", {"db"});
  experiment.storage.db = storage.has("db") ? load::resolve_path(storage.field("db"), base_dir)
                                            : (base_dir / "results.db").lexically_normal();
  if (storage.has("db")) {
    // SQLite creates the file, not its directory: refuse now, not after the
    // model has loaded.
    std::error_code error;
    const std::filesystem::path directory = experiment.storage.db.parent_path();
    if (!std::filesystem::is_directory(directory, error))
      storage.field("db").fail("the directory " + directory.string() +
                               (std::filesystem::exists(directory, error) ? " is not a directory" : " does not exist") +
                               " (create it, or point storage.db elsewhere)");
    load::require_regular_if_present(storage.field("db"), experiment.storage.db, "a results database file");
  }
  return experiment;
}

void move_to_device(Experiment& experiment, const std::string& device) {
  BackendConfig& backend = experiment.backend;
  const auto refuse = [&](const std::string& reason) {
    throw ConfigError(experiment.file, 0, 0, "backend.device", "cannot run on " + device + ": " + reason);
  };
  if (std::find(load::kEngineDevices.begin(), load::kEngineDevices.end(), device) == load::kEngineDevices.end())
    refuse("the devices are cpu and cuda");
  if (backend.kind != "engine") refuse("the backend is " + backend.kind + ", not the engine");
  if (const std::string problem = load::precision_device_problem(backend.precision, device); !problem.empty())
    refuse("precision " + problem);
  if (device == "cpu") {
    const BackendConfig cuda_defaults;
    backend.gpu = cuda_defaults.gpu;
    backend.batch_tokens = cuda_defaults.batch_tokens;
    backend.attention = cuda_defaults.attention;
  }
  backend.device = device;
}

Experiment load_experiment(const std::filesystem::path& file) {
  std::error_code error;
  if (std::filesystem::is_directory(file, error)) {
    throw ConfigError(file, 0, 0, "", "is a directory, not an experiment file");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file, 0, 0, "", "cannot read the experiment file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(file, 0, 0, "", "error while reading the experiment file");
  return parse_experiment(text.str(), file);
}

const std::vector<std::string>& backend_kinds() {
  static const std::vector<std::string> kinds = {"engine", "server", "synthetic-test-double"};
  return kinds;
}

const std::vector<std::string>& dataset_kinds() {
  static const std::vector<std::string> kinds = {"kv", "mdqa", "babilong"};
  return kinds;
}

const std::vector<std::string>& objective_kinds() {
  static const std::vector<std::string> kinds = [] {
    std::vector<std::string> out = method_names();
    out.push_back("combo");  // any two or more methods in one genome
    return out;
  }();
  return kinds;
}

const std::vector<std::string>& search_strategies() {
  static const std::vector<std::string> strategies = {"ga", "grid", "random", "nsga2"};
  return strategies;
}

const std::vector<std::string>& search_objectives() {
  static const std::vector<std::string> names = {
      "accuracy_beginning", "accuracy_middle", "accuracy_end", "accuracy_mean", "neg_gap",
      "logprob_beginning",  "logprob_middle",  "logprob_end",  "logprob_mean",  "logprob_neg_gap"};
  return names;
}

}  // namespace midtune
