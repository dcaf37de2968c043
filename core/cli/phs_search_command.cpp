#include "core/cli/phs_search_command.hpp"

#include <chrono>
#include <limits>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "backends/engine/engine_backend.hpp"
#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/tools/phs_capture.hpp"
#include "core/cli/commands.hpp"
#include "core/report/table.hpp"
#include "core/search/prompt_wrapper.hpp"
#include "backends/engine/tools/phs_channel_search.hpp"
#include "schema/store.hpp"

namespace midtune::cli {

using nlohmann::json;

namespace {

// A bad option or input file: exit 2.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

phs::SearchOptions search_options(const PhsSearchArgs& a) {
  phs::SearchOptions o;
  o.skip_tokens = a.skip_tokens;
  o.top_k = a.top_k;
  o.smoothing = phs::smoothing_from_string(a.smoothing);
  o.smooth_window = a.smooth_window > 0 ? a.smooth_window : o.smoothing == phs::Smoothing::moving_average ? 100 : 11;
  o.aggregate = phs::aggregate_from_string(a.smoothness_over);
  o.same_direction = a.same_direction;
  return o;
}

// PHS layers: the paper's 10..25 of 32 scaled to the model unless given.
std::pair<int, int> scale_layers(const PhsSearchArgs& a, int layers) {
  const auto [paper_first, paper_last] = phs_paper_layers(layers);
  const int first = a.first_layer >= 0 ? a.first_layer : paper_first;
  const int last = a.last_layer >= 0 ? a.last_layer : paper_last;
  if (first > last || last > layers - 1) {
    throw UsageError("phs-search: --first-layer/--last-layer " + std::to_string(first) + ".." + std::to_string(last) +
                     " is not a layer range of this " + std::to_string(layers) + "-layer model (0.." +
                     std::to_string(layers - 1) + ")");
  }
  return {first, last};
}

json settings_json(const PhsSearchArgs& a, const phs::SearchOptions& o, std::pair<int, int> layers) {
  return {{"strings", a.strings},
          {"tokens", a.tokens},
          {"seed", a.seed},
          {"skip_tokens", o.skip_tokens},
          {"smoothing", phs::to_string(o.smoothing)},
          {"smooth_window", o.smooth_window},
          {"smoothness_over", phs::to_string(o.aggregate)},
          {"same_direction", o.same_direction},
          {"analysed_first_layer", o.first_layer},
          {"top_k", o.top_k},
          {"scale", a.scale},
          {"first_layer", layers.first},
          {"last_layer", layers.second},
          {"validation", {{"kind", "kv"}, {"prompts", a.val_prompts}, {"pairs", a.val_pairs},
                          {"gold_positions", a.val_positions}, {"seed", a.val_seed}, {"prime_answer", true},
                          {"metric", "teacher_forced"}}}};
}

struct Candidate {
  phs::ChannelScore score;
  double loss = 0.0;
  int rank = 0;
};

void store_candidates(const std::string& path, const ModelIdentity& model, const json& settings,
                      const std::vector<Candidate>& candidates, double baseline_loss) {
  std::vector<PhsChannelRecord> records;
  for (const Candidate& c : candidates) {
    PhsChannelRecord r;
    r.model_key = model.key();
    r.model_name = model.name;
    r.settings = settings;
    r.channel = c.score.channel;
    r.monotone_layers = static_cast<int>(c.score.monotone_layers.size());
    r.monotone_layer_list = c.score.monotone_layers;
    r.direction = c.score.direction;
    r.smoothness = c.score.smoothness;
    r.validation_loss = c.loss;
    r.baseline_loss = baseline_loss;
    r.rank = c.rank;
    records.push_back(std::move(r));
  }
  Store(path).insert_phs_channels(records);
}

void print_candidates(std::ostream& out, const std::vector<Candidate>& candidates, double baseline_loss) {
  std::vector<report::Row> rows;
  for (const Candidate& c : candidates) {
    rows.push_back({std::to_string(c.rank), std::to_string(c.score.channel),
                    std::to_string(c.score.monotone_layers.size()), c.score.direction > 0 ? "up" : "down",
                    report::format_number(c.score.smoothness, 6), report::format_number(c.loss, 4),
                    report::format_number(c.loss - baseline_loss, 4)});
  }
  report::print_table(out, {"rank", "channel", "monotone layers", "trend", "smoothness", "validation loss", "vs plain"}, rows);
  out << "plain model (no intervention): validation loss " << report::format_number(baseline_loss, 4) << '\n';
}

int search(const PhsSearchArgs& a, std::ostream& out, std::ostream& err) {
  const auto start = std::chrono::steady_clock::now();
  auto note = [&](const std::string& line) {
    if (!a.quiet) err << "phs-search: " << line << " (" << report::format_number(seconds_since(start), 1) << " s)\n";
  };
  phs::SearchOptions options;
  try {
    options = search_options(a);  // a bad --smoothing is named before the model loads
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  std::unique_ptr<engine::EngineBackend> backend;
  try {
    engine::EngineOptions engine_options;
    engine_options.threads = a.threads;
    backend = std::make_unique<engine::EngineBackend>(a.model, engine_options);
  } catch (const std::exception& e) {
    throw UsageError("phs-search: --model " + a.model + ": cannot load the model: " + e.what());
  }
  const ModelIdentity identity = backend->identity();
  const int layers = identity.layers;
  const auto layer_range = scale_layers(a, layers);
  std::vector<BatchItem> items;
  try {
    phs::check_options(options, layers, a.tokens);
    // The model's chat template, as the engine experiments wrap prompts.
    items = engine::tools::kv_validation_items(prompt_wrapper(*backend),
                                               {a.val_prompts, a.val_pairs, a.val_positions, a.val_seed});
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const json settings = settings_json(a, options, layer_range);
  note("model " + identity.name + ": " + std::to_string(layers) + " layers, hidden " + std::to_string(identity.hidden));

  const auto strings = engine::tools::random_token_strings(backend->tokenizer(), a.strings, a.tokens, a.seed);
  const phs::LayerCurves curves =
      engine::tools::average_residual_stream(backend->model(), strings, a.threads, [&](int done) {
    if (done == a.strings || done % 16 == 0) note(std::to_string(done) + "/" + std::to_string(a.strings) + " random strings");
  });
  const double capture_seconds = seconds_since(start);
  const std::vector<phs::ChannelScore> found = phs::find_candidates(curves, options);
  note(std::to_string(found.size()) + " candidate channels");

  const double baseline = engine::tools::validation_loss(*backend, Intervention{}, items);
  std::vector<Candidate> candidates;
  std::vector<double> losses;
  for (const phs::ChannelScore& s : found) {
    Intervention intervention;
    HiddenChannel h;
    h.channel = s.channel;
    h.scale = a.scale;
    for (int l = layer_range.first; l <= layer_range.second; ++l) h.layers.push_back(l);
    intervention.hidden_channel = h;
    candidates.push_back({s, engine::tools::validation_loss(*backend, intervention, items), 0});
    losses.push_back(candidates.back().loss);
    note("channel " + std::to_string(s.channel) + ": loss " + report::format_number(losses.back(), 4));
  }
  const std::vector<int> ranks = phs::rank_by_loss(found, losses);
  for (std::size_t i = 0; i < candidates.size(); ++i) candidates[i].rank = ranks[i];
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) { return x.rank < y.rank; });

  out << "phs-search: " << identity.name << ", " << a.strings << " random strings x " << a.tokens << " tokens, skip "
      << options.skip_tokens << ", " << phs::to_string(options.smoothing) << " window " << options.smooth_window
      << ", smoothness " << phs::to_string(options.aggregate) << " over monotone layers, monotone in > " << layers
      << "/4 of layers " << options.first_layer << ".." << layers - 2 << "\n"
      << "validation: " << items.size() << " KV prompts (" << a.val_pairs << " pairs), scale " << report::format_number(a.scale)
      << " in layers " << layer_range.first << ".." << layer_range.second << "; loss = mean -log p(gold answer) per prompt\n";
  if (candidates.empty()) {
    out << "no channel is monotone in more than " << layers << "/4 layers; nothing stored\n";
  } else {
    print_candidates(out, candidates, baseline);
    store_candidates(a.db, identity, settings, candidates, baseline);
    out << candidates.size() << " candidates written to " << a.db << " (table phs_channels)\n";
  }
  out << "wall time: " << report::format_number(seconds_since(start), 1) << " s (residual capture "
      << report::format_number(capture_seconds, 1) << " s)\n";
  return kExitOk;
}

}  // namespace

CLI::App* add_phs_search_command(CLI::App& app, PhsSearchArgs& a) {
  // Whole-number bounds that read well in CLI11's message ("not in range 1 to ...").
  static const CLI::Range kAtLeastOne(1, std::numeric_limits<int>::max());
  static const CLI::Range kAtLeastZero(0, std::numeric_limits<int>::max());
  CLI::App* c = app.add_subcommand("phs-search", "PHS channel search: positional hidden-state channels ranked by "
                                                 "validation loss, written to the results database");
  c->option_defaults()->always_capture_default();  // --help shows each default
  c->add_option("--model", a.model, "GGUF model path")->required()->check(CLI::ExistingFile);
  c->add_option("--db", a.db, "Results database (default: results.db)");
  c->add_option("--strings", a.strings, "random strings averaged (paper 2000, code 200)")->check(kAtLeastOne);
  c->add_option("--tokens", a.tokens, "tokens per random string (paper 1000)")->check(kAtLeastOne);
  c->add_option("--seed", a.seed, "random strings seed");
  c->add_option("--skip", a.skip_tokens, "first tokens dropped before fitting (paper 30, code 300)")
      ->check(kAtLeastZero);
  c->add_option("--smoothing", a.smoothing, "moving-average (paper) | savgol (reference code)")
      ->check(CLI::IsMember({"moving-average", "savgol"}));
  c->add_option("--smooth-window", a.smooth_window, "smoothing window (default 100 moving-average, 11 savgol)")
      ->check(kAtLeastOne);
  c->add_option("--smoothness-over", a.smoothness_over, "min (code) | mean (paper text) over monotone layers")
      ->check(CLI::IsMember({"min", "mean"}));
  c->add_flag("--same-direction", a.same_direction, "count only the majority direction's monotone layers (code)");
  c->add_option("--top-k", a.top_k, "smoothest candidates validated")->check(kAtLeastOne);
  c->add_option("--scale", a.scale, "channel scale during validation (paper: 0)");
  c->add_option("--first-layer", a.first_layer, "first scaled layer (default: 10/32 of the layers)")
      ->check(kAtLeastZero);
  c->add_option("--last-layer", a.last_layer, "last scaled layer (default: 25/32 of the layers)")
      ->check(kAtLeastZero);
  c->add_option("--val-prompts", a.val_prompts, "KV validation prompts")->check(kAtLeastOne);
  c->add_option("--val-pairs", a.val_pairs, "KV pairs per validation prompt")->check(CLI::Range(2, 1000));
  c->add_option("--val-positions", a.val_positions, "gold positions (fractions), cycled over the prompts")
      ->check(CLI::Range(0.0, 1.0))->delimiter(',');
  c->add_option("--val-seed", a.val_seed, "validation items seed");
  c->add_option("--threads", a.threads, "threads (default: all cores)")->check(kAtLeastZero);
  c->add_flag("-q,--quiet", a.quiet, "no progress lines");
  return c;
}

int run_phs_search(const PhsSearchArgs& args, std::ostream& out, std::ostream& err) {
  try {
    return search(args, out, err);
  } catch (const UsageError& e) {  // options, model file, layer range, validation spec
    err << "ga-run " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "ga-run phs-search: " << e.what() << '\n';
    return kExitFailure;
  }
}

}  // namespace midtune::cli
