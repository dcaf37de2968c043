#include "core/cli/report_command.hpp"

#include <filesystem>
#include <stdexcept>

#include "core/cli/heldout_report.hpp"
#include "core/cli/table.hpp"
#include "core/search/heldout.hpp"
#include "core/search/heldout_statistics.hpp"
#include "schema/store.hpp"

namespace midtune::cli {

using nlohmann::json;

namespace {

ExperimentRecord pick_experiment(Store& store, const std::string& name) {
  const auto found = name.empty() ? store.latest_experiment() : store.find_experiment(name);
  if (!found) {
    if (name.empty()) throw std::runtime_error(store.path() + ": no experiments yet");
    std::string known;
    for (const ExperimentRecord& e : store.experiments()) known += (known.empty() ? "" : ", ") + e.name;
    throw std::runtime_error(store.path() + ": no experiment named '" + name + "' (have: " + known + ")");
  }
  return *found;
}

}  // namespace

json build_report(const std::string& db_path, const std::string& experiment, Store::Check check) {
  if (!std::filesystem::is_regular_file(db_path)) throw std::runtime_error(db_path + ": no such database file");
  Store store(db_path, Store::Access::read_only, check);
  const ExperimentRecord experiment_record = pick_experiment(store, experiment);
  const std::string& name = experiment_record.name;
  const std::int64_t id = experiment_record.id;
  json report = {{"database", db_path}, {"experiment", name}};
  report["search_config"] = experiment_record.search_config;

  report["generations"] = json::array();
  for (const GenerationSummary& g : store.generation_summaries(id))
    report["generations"].push_back({{"generation", g.generation},
                                     {"best", g.best},
                                     {"mean", g.mean},
                                     {"population", g.population},
                                     {"evaluated", g.evaluated},
                                     {"from_cache", g.from_cache}});
  if (report["generations"].empty()) throw std::runtime_error(db_path + ": experiment '" + name + "' has no completed generation yet");

  const BestIndividual best = *store.best_individual(id);
  report["best"] = {{"candidate", best.individual.candidate_id},
                    {"generation", best.individual.generation},
                    {"fitness", best.individual.fitness},
                    {"genome", best.individual.genome},
                    {"origin", best.individual.origin},
                    {"intervention", best.intervention},
                    {"layer_scales", layer_scales(best.intervention)},
                    {"position_scores", best.position_scores},
                    {"fitness_inputs", best.fitness_inputs}};
  report["heldout"] = heldout_json(store, id);
  if (!report["heldout"].empty()) {
    // The fitness weights the search used (stored with the experiment).
    HeldoutStatisticsOptions options;
    const json weights =
        experiment_record.search_config.value("objective", json::object()).value("weights", json::object());
    options.weights.beginning = weights.value("beginning", options.weights.beginning);
    options.weights.middle = weights.value("middle", options.weights.middle);
    options.weights.end = weights.value("end", options.weights.end);
    report["heldout_statistics"] = heldout_statistics(store.heldout_rows(id), options);
    for (json& entry : report["heldout"])  // each role's intervals travel with it (error bars)
      for (const json& i : report["heldout_statistics"]["intervals"])
        if (i["role"] == entry["role"]) entry["intervals"] = i["positions"];
  }
  return report;
}

namespace {

void print_markdown(const json& r, std::ostream& out) {
  out << "# Experiment " << r["experiment"].get<std::string>() << "\n\n## Generations\n\n";
  std::vector<Row> rows;
  for (const json& g : r["generations"])
    rows.push_back({g["generation"].dump(), format_number(g["best"]), format_number(g["mean"]),
                    g["population"].dump(), g["evaluated"].dump(), g["from_cache"].dump()});
  print_table(out, {"generation", "best", "mean", "population", "evaluated", "from cache"}, rows);
  const json& b = r["best"];
  out << "\n## Best individual\n\ncandidate " << b["candidate"] << " (generation " << b["generation"] << ", "
      << b["origin"].get<std::string>() << "), fitness " << format_number(b["fitness"]) << "\n\ngenome: "
      << b["genome"].dump() << "\n\n## Decoded per-layer RoPE scales\n\n";
  rows.clear();
  const json& scales = b["layer_scales"];
  if (scales.size() == 1) {
    rows.push_back({"all", scales[0].is_number() ? format_number(scales[0]) : scales[0].dump()});
  } else {
    for (size_t l = 0; l < scales.size(); ++l)
      rows.push_back({std::to_string(l), scales[l].is_number() ? format_number(scales[l]) : scales[l].dump()});
  }
  if (rows.empty()) rows.push_back({"all", "1 (no RoPE scaling)"});
  print_table(out, {"layer", "scale"}, rows);
  out << "\n## Per-position scores of the best\n\n";
  rows.clear();
  for (const json& p : b["position_scores"])
    rows.push_back({format_number(p["position"]), format_number(p["accuracy"]), p["correct"].dump(),
                    p["samples"].dump()});
  print_table(out, {"gold position", "accuracy", "correct", "samples"}, rows);
  if (!r["heldout"].empty()) {
    out << "\n## Held-out accuracy by gold position (%)\n\n";
    print_side_by_side(r["heldout"], out);
    print_heldout_statistics(r["heldout_statistics"], out);
  }
}

// Long form: one row per value, so every section fits one CSV table.
void print_long_csv(const json& r, std::ostream& out) {
  std::vector<Row> rows;
  for (const json& g : r["generations"])
    for (const char* field : {"best", "mean", "population", "evaluated", "from_cache"})
      rows.push_back({"generation", g["generation"].dump(), field,
                      g[field].is_number_float() ? format_number(g[field], 6) : g[field].dump()});
  const json& b = r["best"];
  rows.push_back({"best", "", "candidate", b["candidate"].dump()});
  rows.push_back({"best", "", "fitness", format_number(b["fitness"], 6)});
  for (size_t k = 0; k < b["genome"].size(); ++k)
    rows.push_back({"genome", std::to_string(k), "value", b["genome"][k].dump()});
  for (size_t l = 0; l < b["layer_scales"].size(); ++l)
    rows.push_back({"layer_scale", b["layer_scales"].size() == 1 ? "all" : std::to_string(l), "scale",
                    b["layer_scales"][l].dump()});
  for (const json& p : b["position_scores"])
    rows.push_back({"position", format_number(p["position"]), "accuracy", format_number(p["accuracy"], 6)});
  append_heldout_csv_rows(r["heldout"], rows);
  if (r.contains("heldout_statistics")) append_heldout_statistics_csv_rows(r["heldout_statistics"], rows);
  print_csv(out, {"section", "index", "field", "value"}, rows);
}

}  // namespace

int print_report(const std::string& db_path, const std::string& experiment, const std::string& format,
                 std::ostream& out, std::ostream& err, const ReportOptions& options) {
  if (format != "md" && format != "json" && format != "csv") {
    err << "ga-run report: --format must be md, json or csv (got '" << format << "')\n";
    return 2;
  }
  try {
    const json report = build_report(db_path, experiment, options.check);
    if (format == "json")
      out << report.dump(2) << '\n';
    else if (format == "csv")
      print_long_csv(report, out);
    else
      print_markdown(report, out);
    if (report["heldout"].empty()) {
      if (!options.svg_path.empty()) err << "plot: none (the experiment has no held-out results yet)\n";
      return 0;
    }
    const std::string svg = options.svg_path.empty()
                                ? heldout_svg_beside(db_path, report["experiment"].get<std::string>())
                                : options.svg_path;
    try {
      write_heldout_svg(svg, report["experiment"].get<std::string>(), report["heldout"]);
      err << "plot: " << svg << '\n';
    } catch (const std::exception& e) {
      // The report is printed already; a results folder may be read-only.
      if (!options.svg_path.empty()) {  // asked for: a failure
        err << "ga-run report: " << e.what() << '\n';
        return 1;
      }
      err << "plot: not written (" << e.what() << "); choose where with --svg PATH\n";
    }
    return 0;
  } catch (const std::exception& e) {
    err << "ga-run report: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace midtune::cli
