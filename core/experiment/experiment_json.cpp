// Canonical JSON of an experiment, its search fingerprint and the list of
// differences that makes a refused resume say what changed.
#include <algorithm>
#include <map>
#include <set>

#include "methods/intervention.hpp"
#include "core/experiment/experiment.hpp"

namespace midtune {
namespace {

using nlohmann::json;

json path_or_null(const std::optional<std::filesystem::path>& path) {
  return path ? json(path->string()) : json(nullptr);
}

json file_name_or_null(const std::optional<std::filesystem::path>& path) {
  return path ? json(path->filename().string()) : json(nullptr);
}

json backend_json(const BackendConfig& backend, bool fingerprint) {
  json j = {{"kind", backend.kind}};
  if (backend.kind == "engine") {
    // The fingerprint knows the model by file name, so moving the file or the
    // folder does not refuse a resume; the run loop also compares the
    // backend's ModelIdentity.
    j["model"] = fingerprint ? backend.model.filename().string() : backend.model.string();
    j["device"] = backend.device;
    // Only when set, so that experiments stored before the key keep their fingerprint.
    if (backend.precision != "native") j["precision"] = backend.precision;
    if (backend.kv_cache != "fp32") j["kv_cache"] = backend.kv_cache;
    if (!fingerprint) j["threads"] = backend.threads;
  } else if (backend.kind == "server") {
    if (!fingerprint) {
      j["endpoints"] = backend.server.endpoints;
      j["timeout_s"] = backend.server.timeout_s;
      j["retries"] = backend.server.retries;
      if (!backend.server.token_file.empty()) j["token_file"] = backend.server.token_file.string();
    }
  } else {
    j["layers"] = backend.synthetic.layers;
    j["heads"] = backend.synthetic.heads;
    j["noise"] = backend.synthetic.noise;
    if (!fingerprint) j["latency_ms"] = backend.synthetic.latency_ms;
    if (!fingerprint) j["prompt_latency_ms"] = backend.synthetic.prompt_latency_ms;
  }
  return j;
}

json dataset_json(const DatasetConfig& dataset, bool fingerprint) {
  json j = {{"kind", dataset.kind},
            {"file", fingerprint ? file_name_or_null(dataset.file) : path_or_null(dataset.file)},
            {"gold_positions", dataset.gold_positions},
            {"search_samples", dataset.search_samples},
            {"heldout_samples", dataset.heldout_samples},
            {"metric", dataset.metric}};
  if (!dataset.heldout_per_position.empty()) j["heldout_samples"] = dataset.heldout_per_position;
  if (dataset.kind == "kv") j["pairs"] = dataset.pairs;
  // Absent when off, so fingerprints of files written before the key stay equal.
  if (dataset.prime_answer) j["prime_answer"] = true;
  if (dataset.kind == "mdqa") {
    j["documents"] = dataset.documents;
    j["distractors"] = dataset.distractors;
  }
  // Teacher-forced scoring never decodes, so the token limit cannot matter.
  if (!fingerprint || dataset.metric == "generate") j["max_new_tokens"] = dataset.max_new_tokens;
  return j;
}

json objective_json(const ObjectiveConfig& objective, bool fingerprint) {
  const std::vector<std::string> used = objective.methods();
  const auto in_use = [&](const std::string& method) {
    return !fingerprint || std::find(used.begin(), used.end(), method) != used.end();
  };
  json j = {{"kind", objective.kind},
            {"weights",
             {{"beginning", objective.weights.beginning},
              {"middle", objective.weights.middle},
              {"end", objective.weights.end}}}};
  // Absent for the default, so experiments stored before the key resume as they began.
  if (objective.fitness != "accuracy") j["fitness"] = objective.fitness;
  if (in_use("lpes")) {
    const LpesConfig& lpes = objective.lpes;
    j["lpes"] = {{"curve", lpes.curve},   {"degree", lpes.degree}, {"x_step", lpes.x_step},
                 {"y_min", lpes.y_min},   {"y_max", lpes.y_max},   {"y_step", lpes.y_step}};
  }
  if (in_use("pi")) {
    j["pi"] = {{"min", objective.pi.min}, {"max", objective.pi.max}, {"step", objective.pi.step}};
  }
  for (const auto& genes : objective.method_genes) {
    if (in_use(genes.method)) j[genes.method] = {{"genes", genes.to_json()}};
  }
  if (objective.kind == "combo") j["combo"] = {{"methods", objective.combo}};
  return j;
}

json grid_json(const std::vector<GridAxis>& grid) {
  json values = json::object();
  for (const auto& axis : grid) {
    json list = json::array();
    for (const auto& value : axis.values) list.push_back(gene_value_to_json(value));
    values[axis.gene] = list;
  }
  return {{"values", values}};
}

json search_json(const SearchConfig& search, bool fingerprint) {
  const GaConfig& ga = search.ga;
  json j = {{"strategy", search.strategy}};
  if (!fingerprint || search.strategy == "ga") {
    j["ga"] = {{"population", ga.population},
               {"parents", ga.parents},
               {"generations", ga.generations},
               {"mutants", ga.mutants},
               {"crossovers", ga.crossovers},
               {"crossover_tries", ga.crossover_tries},
               {"mutation_x", ga.mutation_x},
               {"mutation_y", ga.mutation_y},
               {"mutation", ga.mutation},
               {"crossover", ga.crossover},
               {"selection", ga.selection},
               {"elitism", ga.elitism}};
    // Truncation selection never reads the tournament size.
    if (!fingerprint || ga.selection == "tournament") j["ga"]["tournament_size"] = ga.tournament_size;
    // Absent when off, so experiments stored before the key resume as they began.
    if (ga.patience > 0) j["ga"]["patience"] = ga.patience;
  }
  if ((!fingerprint && !search.grid.empty()) || search.strategy == "grid") {
    j["grid"] = grid_json(search.grid);
  }
  if (!fingerprint || search.strategy == "random") j["random"] = {{"samples", search.random_samples}};
  // Only for nsga2, so the fingerprints and JSON of other strategies stay as they were.
  if (search.strategy == "nsga2") {
    const Nsga2SearchConfig& n = search.nsga2;
    j["nsga2"] = {{"population", n.population},      {"generations", n.generations},
                  {"mutation", n.mutation},          {"crossover", n.crossover},
                  {"crossover_tries", n.crossover_tries}};
    j["objectives"] = search.objectives;
  }
  // Absent when off, so experiments stored before the key resume as they began.
  if (search.unique_children) j["unique_children"] = true;
  // Absent when off, so experiments stored before the key resume as they began.
  if (search.racing)
    j["racing"] = {{"first", search.racing->first},
                   {"step", search.racing->step},
                   {"confidence", search.racing->confidence}};
  return j;
}

json experiment_json(const Experiment& experiment, bool fingerprint) {
  json j = {{"seed", experiment.seed},
            {"backend", backend_json(experiment.backend, fingerprint)},
            {"dataset", dataset_json(experiment.dataset, fingerprint)},
            {"objective", objective_json(experiment.objective, fingerprint)},
            {"search", search_json(experiment.search, fingerprint)}};
  if (!fingerprint) {
    j["name"] = experiment.name;
    j["storage"] = {{"db", experiment.storage.db.string()}};
  }
  return j;
}

// Appends "path: old -> new" for each difference, descending into objects
// present on both sides; a list, or an object on one side only, is one value.
void collect_differences(const json* before, const json* after, const std::string& path,
                         std::map<std::string, std::string>& out) {
  if (before != nullptr && after != nullptr && before->is_object() && after->is_object()) {
    std::set<std::string> keys;
    for (const auto& item : before->items()) keys.insert(item.key());
    for (const auto& item : after->items()) keys.insert(item.key());
    for (const auto& key : keys) {
      const auto child = [&](const json* side) { return side->contains(key) ? &(*side)[key] : nullptr; };
      collect_differences(child(before), child(after), path.empty() ? key : path + "." + key, out);
    }
    return;
  }
  const auto shown = [](const json* side) { return side == nullptr ? std::string("(absent)") : side->dump(); };
  if (shown(before) != shown(after)) out[path] = path + ": " + shown(before) + " -> " + shown(after);
}

}  // namespace

std::vector<std::string> ObjectiveConfig::methods() const {
  return kind == "combo" ? combo : std::vector<std::string>{kind};
}

const MethodGenes* ObjectiveConfig::genes_of(const std::string& method) const {
  for (const auto& genes : method_genes) {
    if (genes.method == method) return &genes;
  }
  return nullptr;
}

nlohmann::json Experiment::to_json() const { return experiment_json(*this, false); }

nlohmann::json Experiment::search_fingerprint() const { return experiment_json(*this, true); }

std::string Experiment::search_hash() const { return fnv1a_hex(search_fingerprint().dump()); }

std::vector<std::string> search_differences(const nlohmann::json& stored_fingerprint,
                                            const nlohmann::json& now_fingerprint) {
  std::map<std::string, std::string> changes;  // sorted by key path
  collect_differences(&stored_fingerprint, &now_fingerprint, "", changes);
  std::vector<std::string> lines;
  for (auto& [path, line] : changes) lines.push_back(std::move(line));
  return lines;
}

std::vector<std::string> search_differences(const Experiment& stored, const Experiment& now) {
  return search_differences(stored.search_fingerprint(), now.search_fingerprint());
}

}  // namespace midtune
