#include "core/cli/eval_command.hpp"

#include <fstream>
#include <iostream>
#include <stdexcept>

#include "core/cli/commands.hpp"
#include "core/report/heldout_report.hpp"
#include "core/cli/run_setup.hpp"
#include "core/experiment/config_error.hpp"
#include "core/search/heldout.hpp"
#include "core/search/heldout_statistics.hpp"

namespace midtune::cli {

using nlohmann::json;

namespace {

Intervention read_intervention(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::invalid_argument(path + ": cannot open the intervention file");
  json j;
  try {
    j = json::parse(file);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(path + ": not JSON: " + e.what());
  }
  try {
    return Intervention::from_json(j);
  } catch (const std::exception& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

// Where an evaluation's numbers came from: the cache, this run, or this run
// completing a row a stopped run had stored in part.
std::string how_computed(const SplitEvaluation& evaluation, std::size_t prompts) {
  if (evaluation.cache_hit) return "from the cache";
  std::string text = report::format_number(evaluation.wall_seconds, 1) + " s";
  if (evaluation.resumed_samples > 0)
    text += ", resumed: " + std::to_string(evaluation.resumed_samples) + " of " + std::to_string(prompts) +
            " prompts were stored";
  return text;
}

std::int64_t experiment_id(Store& store, const std::string& name) {
  const auto record = store.find_experiment(name);
  if (!record) throw std::invalid_argument(store.path() + ": no experiment named '" + name + "' (run it first)");
  return record->id;
}

json entry_json(const std::string& role, const Intervention& intervention, const SplitEvaluation& evaluation) {
  const json j = intervention.to_json();
  json scales = json::array();
  for (const auto& row : intervention.rope_scale) scales.push_back(row.size() == 1 ? json(row[0]) : json(row));
  return {{"role", role},
          {"intervention", j},
          {"layer_scales", scales},
          {"position_scores", to_json(evaluation.scores)},
          {"summary", evaluation.summary}};
}

}  // namespace

CLI::App* add_eval_command(CLI::App& app, EvalRequest& request) {
  CLI::App* eval = app.add_subcommand("eval", "Evaluate one intervention on a split; per-position table and summary");
  eval->add_option("experiment", request.experiment_file, "Experiment file (YAML)")->required();
  auto* file = eval->add_option("--intervention", request.intervention_file, "Intervention JSON file");
  auto* best = eval->add_flag("--best", request.best, "The best individual of the file's experiment in --db");
  file->excludes(best);
  eval->add_option("--against", request.against,
                   "baseline | FILE.json: also evaluate this intervention and print the paired statistics "
                   "(Wilson intervals, exact McNemar, paired bootstrap CI, verdict)");
  eval->add_option("--split", request.split, "search | heldout")->check(CLI::IsMember({"search", "heldout"}));
  eval->add_option("--db", request.db, "Results database (default: storage.db of the file)");
  eval->add_option("--device", request.device,
                   "cpu | cuda: run the file's engine on this device instead of its backend.device (the same "
                   "items; the results are stored as this device's)");
  return eval;
}

int run_eval(const EvalRequest& request, std::ostream& out, std::ostream& err) {
  try {
    Experiment experiment = load_experiment(request.experiment_file);
    if (!request.device.empty()) move_to_device(experiment, request.device);
    const datasets::Split split = datasets::split_from_string(request.split);
    // An explicit --db names results to read: a mistyped path is an error,
    // not a new empty database.
    Store store(request.db.empty() ? experiment.storage.db.string() : request.db,
                request.db.empty() ? Store::Access::read_write : Store::Access::read_write_existing);
    Intervention intervention;
    std::string label = "baseline";
    if (!request.intervention_file.empty()) {
      intervention = read_intervention(request.intervention_file);
      label = "intervention";
    } else if (request.best) {
      intervention = best_intervention(store, experiment_id(store, experiment.name));
      label = "best";
    }
    auto prepared = prepare_search(experiment, experiment.name, split);
    const SplitEvaluation evaluation = Evaluator(prepared->inputs).evaluate(store, intervention);
    out << "experiment '" << experiment.name << "', " << request.split << " split, " << prepared->inputs.metric
        << ", " << prepared->inputs.items.size() << " prompts, "
        << how_computed(evaluation, prepared->inputs.items.size())
        << "\nintervention: " << intervention.canonical() << "\n\n";
    if (request.against.empty()) {
      report::print_side_by_side(json::array({entry_json(label, intervention, evaluation)}), out);
      return kExitOk;
    }
    const bool against_baseline = request.against == "baseline";
    const Intervention other = against_baseline ? Intervention{} : read_intervention(request.against);
    // Distinct role names, so the paired statistics can tell the two apart.
    const std::string other_label = against_baseline && label != "baseline" ? "baseline" : "against";
    const SplitEvaluation other_evaluation = Evaluator(prepared->inputs).evaluate(store, other);
    out << "against: " << other.canonical() << " ("
        << how_computed(other_evaluation, prepared->inputs.items.size())
        << ")\n\n";
    report::print_side_by_side(json::array({entry_json(other_label, other, other_evaluation),
                                    entry_json(label, intervention, evaluation)}),
                       out);
    const auto row = [&](const std::string& role, const SplitEvaluation& e) {
      return HeldoutRow{role, request.split, {}, {}, {}, prepared->inputs.metric, store.evaluation_samples(e.evaluation_id)};
    };
    HeldoutStatisticsOptions options;
    options.weights = {experiment.objective.weights.beginning, experiment.objective.weights.middle,
                       experiment.objective.weights.end};
    options.subject_role = label;
    report::print_heldout_statistics(heldout_statistics({row(other_label, other_evaluation), row(label, evaluation)}, options),
                             out);
    return kExitOk;
  } catch (const ConfigError& e) {
    err << "ga-run eval: " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::invalid_argument& e) {
    err << "ga-run eval: " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "ga-run eval: " << e.what() << '\n';
    return kExitFailure;
  }
}

void run_heldout_step(Store& store, const Experiment& experiment, PreparedSearch& search, std::int64_t experiment_id,
                      std::ostream& out) {
  const auto heldout = prepare_split(experiment, *search.backend, datasets::Split::heldout);
  heldout->inputs.stop_signal = search.inputs.stop_signal;  // a stop asked for ends it between slices too
  const std::vector<HeldoutEntry> entries =
      run_heldout(store, experiment_id, heldout->inputs, search.objective.get(),
                  [](const std::string& note) { std::cerr << "midtune: held-out: " << note << '\n'; });
  json rendered = json::array();
  for (const HeldoutEntry& e : entries) rendered.push_back(entry_json(e.role, e.intervention, e.evaluation));
  out << "held-out (" << heldout->inputs.items.size() << " prompts, " << heldout->inputs.metric << "):\n";
  report::print_side_by_side(rendered, out);
}

}  // namespace midtune::cli
