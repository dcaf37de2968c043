#include "core/cli/run_setup.hpp"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "backends/engine/engine_factory.hpp"
#include "backends/server/server_backend.hpp"
#include "backends/synthetic/synthetic_test_double.hpp"
#include "core/cli/build_info.hpp"
#include "core/experiment/config_error.hpp"
#include "core/ga/factory.hpp"
#include "core/search/prompt_wrapper.hpp"

namespace midtune {

using nlohmann::json;

std::unique_ptr<Backend> make_backend(const Experiment& experiment) {
  const BackendConfig& b = experiment.backend;
  if (b.kind == SyntheticTestDoubleBackend::kKind) {
    SyntheticTestDoubleConfig config;
    config.layers = b.synthetic.layers;
    config.heads = b.synthetic.heads;
    config.noise = b.synthetic.noise;
    config.latency_ms = b.synthetic.latency_ms;
    config.prompt_latency_ms = b.synthetic.prompt_latency_ms;
    config.seed = experiment.seed;
    return std::make_unique<SyntheticTestDoubleBackend>(config);
  }
  if (b.kind == "engine") {
    engine::EngineDeviceOptions options;
    options.device = b.device;
    options.threads = b.threads;
    options.gpu = b.gpu;
    options.batch_tokens = static_cast<std::size_t>(b.batch_tokens);
    options.precision = b.precision;
    options.kv_cache = b.kv_cache;
    options.attention = b.attention;
    return engine::make_engine_backend(b.model, options);
  }
  if (b.kind == "server") {
    server::ServerBackendOptions options;
    options.endpoints = b.server.endpoints;
    options.retry.timeout_s = b.server.timeout_s;
    options.retry.retries = b.server.retries;
    if (!b.server.token_file.empty()) options.token = server::read_token_file(b.server.token_file);
    return std::make_unique<server::ServerBackend>(options);
  }
  throw std::invalid_argument("backend.kind: '" + b.kind + "' cannot run in this build yet (available: engine, server, " +
                              SyntheticTestDoubleBackend::kKind + ")");
}

namespace {
// The experiment file spells operator names with hyphens (one-point), core/ga
// with underscores (one_point).
std::string operator_name(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}
}  // namespace

json strategy_config(const SearchConfig& search) {
  if (search.strategy == "ga") {
    const GaConfig& ga = search.ga;
    json config = {{"kind", "ga"},
            {"population_size", ga.population},
            {"parents", ga.parents},
            {"generations", ga.generations},
            {"mutants", ga.mutants},
            {"crossovers", ga.crossovers},
            {"selection", operator_name(ga.selection)},
            {"tournament_size", ga.tournament_size},
            // experiments/README.md: elitism 0 = Algorithm 1 (carry the parent pool).
            {"elites", ga.elitism > 0 ? ga.elitism : -1},
            {"mutation", {{"kind", operator_name(ga.mutation)}, {"max_dx", ga.mutation_x}, {"max_dy", ga.mutation_y}}},
            {"crossover", {{"kind", operator_name(ga.crossover)}, {"max_tries", ga.crossover_tries}}}};
    if (search.unique_children) config["unique_children"] = true;
    if (ga.patience > 0) config["patience"] = ga.patience;
    return config;
  }
  if (search.strategy == "grid") {
    json values = json::object();
    for (const GridAxis& axis : search.grid) {
      json list = json::array();
      for (const GeneValue& v : axis.values) list.push_back(gene_value_to_json(v));
      values[axis.gene] = list;
    }
    return {{"kind", "grid"}, {"values", values}};
  }
  if (search.strategy == "random") return {{"kind", "random"}, {"count", search.random_samples}};
  if (search.strategy == "nsga2") {
    const Nsga2SearchConfig& n = search.nsga2;
    json config = {{"kind", "nsga2"},
                   {"population_size", n.population},
                   {"generations", n.generations},
                   {"objectives", static_cast<int>(search.objectives.size())},
                   {"mutation", {{"kind", operator_name(n.mutation)}}},
                   {"crossover", {{"kind", operator_name(n.crossover)}, {"max_tries", n.crossover_tries}}}};
    if (search.unique_children) config["unique_children"] = true;
    return config;
  }
  throw std::invalid_argument("search.strategy: unknown strategy '" + search.strategy + "'");
}

int planned_generations(const SearchConfig& search) {
  if (search.strategy == "ga") return search.ga.generations + 1;  // generation 0 is the initial population
  if (search.strategy == "nsga2") return search.nsga2.generations + 1;
  return 0;
}

namespace {

datasets::SliceSpec slice_spec(const Experiment& e) {
  datasets::SliceSpec spec;
  spec.kind = datasets::task_kind_from_string(e.dataset.kind);
  spec.file = e.dataset.file ? e.dataset.file->string() : "";
  spec.chunks = static_cast<std::size_t>(e.dataset.chunks());  // kv pairs or mdqa documents
  spec.gold_positions = e.dataset.gold_positions;
  spec.search_samples = static_cast<std::size_t>(e.dataset.search_samples);
  spec.heldout_samples = static_cast<std::size_t>(e.dataset.heldout_samples);
  spec.heldout_per_position.assign(e.dataset.heldout_per_position.begin(), e.dataset.heldout_per_position.end());
  spec.seed = e.seed;
  spec.prime_answer = e.dataset.prime_answer;
  spec.distractors = datasets::distractor_source_from_string(e.dataset.distractors);
  return spec;
}

}  // namespace

void require_input_files(const Experiment& e) {
  std::error_code error;
  if (e.backend.kind == "engine" && !std::filesystem::is_regular_file(e.backend.model, error)) {
    throw ConfigError(e.file, 0, 0, "backend.model",
                      e.backend.model.string() + " not found (scripts/fetch_model.sh fetches the test model, "
                      "SmolLM2-135M-Instruct Q4_1, into ~/.cache/midtune; any GGUF Llama model works)");
  }
  if (e.dataset.file && !std::filesystem::is_regular_file(*e.dataset.file, error)) {
    throw ConfigError(e.file, 0, 0, "dataset.file",
                      e.dataset.file->string() + " not found. The set-up does not fetch benchmark data: the "
                      "Lost in the Middle files (kv-retrieval-*.jsonl.gz, nq-open-*.jsonl.gz) come from "
                      "github.com/nelson-liu/lost-in-the-middle (kv_retrieval_data/, qa_data/); put them "
                      "there or point dataset.file at your copy (experiments/README.md)");
  }
}

void require_searchable_on_backend(const Experiment& e, const Objective& objective, const Backend& backend) {
  const GenomeSpace& space = objective.space();
  const Genome start = objective.initial_genome();
  auto check = [&](const Genome& genome, const std::string& what) {
    try {
      backend.validate(objective.decode(genome));
    } catch (const std::exception& error) {
      throw ConfigError(e.file, 0, 0, "objective", what + " does not fit the model: " + error.what());
    }
  };
  check(start, "the start genome " + space.to_json(start).dump());
  // Each gene at both ends of its range (every value of a short list), the
  // others at the start: a channel past the hidden size or a layer past the
  // model is refused now, not after hours of search.
  for (std::size_t g = 0; g < space.size(); ++g) {
    const Gene& gene = space.gene(g);
    const std::int64_t count = grid_size(gene);
    std::vector<std::int64_t> indices = {0, count - 1};
    if (count <= 16) {
      indices.clear();
      for (std::int64_t k = 0; k < count; ++k) indices.push_back(k);
    }
    for (const std::int64_t k : indices) {
      Genome genome = start;
      genome[g] = grid_value(gene, k);
      if (!space.is_valid(genome)) continue;  // e.g. min_ratio above max_ratio: never asked for
      check(genome, "gene " + gene_name(gene) + " = " + space.to_json(genome).at(gene_name(gene)).dump());
    }
  }
}

namespace {

// The evaluation inputs of `slice` on `backend` under the experiment's metric.
void fill_evaluation_inputs(const Experiment& e, Backend& backend, const datasets::Slice& slice, EvaluationInputs& in) {
  in.backend = &backend;
  for (const datasets::EvalSample& s : slice.samples) {
    in.items.push_back(s.item);
    in.position_index.push_back(s.position_index);
  }
  in.gold_positions = e.dataset.gold_positions;
  in.dataset_slice = slice.identity;
  in.run_options.mode = mode_from_string(e.dataset.metric);
  in.run_options.max_new_tokens = e.dataset.max_new_tokens;
  in.metric = in.run_options.mode == Mode::generate
                  ? "generate(max_new_tokens=" + std::to_string(e.dataset.max_new_tokens) + ")"
                  : "teacher_forced";
  const datasets::Slice* samples = &slice;
  if (in.run_options.mode == Mode::teacher_forced)
    in.score = [](std::size_t, const SampleOutput& o) { return o.gold_emitted_first; };
  else
    in.score = [samples](std::size_t i, const SampleOutput& o) {
      return datasets::is_correct(samples->samples[i], o.output_text);
    };
}

}  // namespace

std::unique_ptr<PreparedSplit> prepare_split(const Experiment& e, Backend& backend, datasets::Split split) {
  auto p = std::make_unique<PreparedSplit>();
  p->slice = datasets::build_slice(slice_spec(e), split, prompt_wrapper(backend));
  fill_evaluation_inputs(e, backend, p->slice, p->inputs);
  return p;
}

std::unique_ptr<PreparedSearch> prepare_search(const Experiment& e, const std::string& experiment_name,
                                               datasets::Split split, std::unique_ptr<Backend> backend) {
  require_input_files(e);
  auto p = std::make_unique<PreparedSearch>();
  p->backend = backend ? std::move(backend) : make_backend(e);
  const ModelIdentity model = p->backend->identity();
  p->objective = make_objective(e.objective, model.layers);
  require_searchable_on_backend(e, *p->objective, *p->backend);
  p->slice = datasets::build_slice(slice_spec(e), split, prompt_wrapper(*p->backend));

  SearchInputs& in = p->inputs;
  fill_evaluation_inputs(e, *p->backend, p->slice, in);
  in.experiment_name = experiment_name;
  in.config_text = e.text;
  in.source_path = e.file.string();
  in.search_config = e.search_fingerprint();
  // The experiment file names the model and the data; a resume must also see
  // what they contain, or a replaced file (other weights, other questions
  // under the same name) would mix two experiments in one population.
  in.search_config["backend"]["identity"] = model.to_json();
  in.search_config["dataset"]["contents"] = p->slice.source;
  in.provenance = cli::run_provenance(*p->backend);
  in.objective = p->objective.get();
  in.scoring.fitness = fitness_kind_from_string(e.objective.fitness);
  in.scoring.weights = {e.objective.weights.beginning, e.objective.weights.middle, e.objective.weights.end};
  in.scoring.objectives = e.search.objectives;
  const json strategy = strategy_config(e.search);
  const GenomeSpace* space = &p->objective->space();
  const std::uint64_t seed = e.seed;
  in.make_strategy = [space, strategy, seed] { return make_strategy(*space, strategy, seed); };
  in.make_strategy();  // a bad search section fails here, as a configuration error
  in.unique_children = e.search.unique_children;
  if (e.search.racing) {
    in.racing = RaceSettings{e.search.racing->first, e.search.racing->step, e.search.racing->confidence};
    for (const datasets::EvalSample& s : p->slice.samples) in.race_keys.push_back(s.base_id);
  }
  in.planned_generations = planned_generations(e.search);
  return p;
}

}  // namespace midtune
