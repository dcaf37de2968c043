#include "core/report/experiment_report.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/report/heldout_report.hpp"
#include "core/report/html_report.hpp"
#include "core/report/provenance.hpp"
#include "core/report/svg_plot.hpp"
#include "core/report/table.hpp"
#include "core/search/heldout.hpp"
#include "core/search/heldout_statistics.hpp"
#include "schema/store.hpp"

namespace midtune::report {

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
  if (!std::filesystem::exists(db_path)) throw std::runtime_error(db_path + ": no such database file");
  Store store(db_path, Store::Access::read_only, check);
  const ExperimentRecord experiment_record = pick_experiment(store, experiment);
  const std::string& name = experiment_record.name;
  const std::int64_t id = experiment_record.id;
  json report = {{"database", db_path}, {"experiment", name}};
  report["search_config"] = experiment_record.search_config;
  report["provenance"] = provenance_json(experiment_record.search_config);

  // What computed the rows: each run's provenance, and each generation's run.
  report["runs"] = json::array();
  std::map<std::int64_t, json> run_of;
  for (const RunProvenance& run : store.run_provenances(id)) {
    report["runs"].push_back({{"run", run.run_id}, {"started_at", run.started_at}, {"provenance", run.provenance}});
    run_of[run.run_id] = run.provenance;
  }
  report["generations"] = json::array();
  for (const GenerationSummary& g : store.generation_summaries(id))
    report["generations"].push_back({{"generation", g.generation},
                                     {"run", g.run_id ? json(*g.run_id) : json(nullptr)},
                                     {"computed_on", g.run_id && run_of.count(*g.run_id) ? run_path(run_of[*g.run_id])
                                                                                         : std::string("-")},
                                     {"best", g.best},
                                     {"mean", g.mean},
                                     {"population", g.population},
                                     {"evaluated", g.evaluated},
                                     {"from_cache", g.from_cache},
                                     {"raced", g.raced}});
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
  // nsga2: the final Pareto front, each member with its objectives (named
  // as in search.objectives) and its stored scalar fitness.
  const json objective_names = experiment_record.search_config.value("search", json::object()).value("objectives", json::array());
  report["pareto_front"] = json::array();
  for (const FrontMember& member : pareto_front(store, id)) {
    const auto individual = store.find_individual(id, member.candidate_id);
    json objectives = json::object();
    for (std::size_t k = 0; k < member.objectives.size(); ++k)
      objectives[k < objective_names.size() ? objective_names[k].get<std::string>() : std::to_string(k)] =
          member.objectives[k];
    report["pareto_front"].push_back({{"candidate", member.candidate_id},
                                      {"objectives", objectives},
                                      {"fitness", individual ? json(individual->fitness) : json(nullptr)},
                                      {"genome", individual ? individual->genome : json(nullptr)}});
  }
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

// Text a results file brings (names of the experiment, model, host) is
// escaped as in the HTML report: Markdown passes HTML through to its viewer.
void print_markdown(const json& r, std::ostream& out) {
  out << "# Experiment " << xml_escape(r["experiment"].get<std::string>())
      << "\n\nRun on: " << xml_escape(provenance_text(r["provenance"])) << "\n\n## Generations\n\n";
  std::vector<Row> rows;
  for (const json& g : r["generations"])
    rows.push_back({g["generation"].dump(), format_number(g["best"]), format_number(g["mean"]),
                    g["population"].dump(), g["evaluated"].dump(), g["from_cache"].dump(), g["raced"].dump(),
                    xml_escape(g["computed_on"].get<std::string>())});
  print_table(out,
              {"generation", "best", "mean", "population", "evaluated", "from cache", "dropped by racing",
               "computed on"},
              rows);
  out << "\nRuns:\n";
  for (const json& run : r["runs"])
    out << "- run " << run["run"].dump() << " (" << run["started_at"].get<std::string>()
        << "): " << xml_escape(run_text(run["provenance"])) << '\n';
  const json& b = r["best"];
  out << "\n## Best individual\n\ncandidate " << b["candidate"] << " (generation " << b["generation"] << ", "
      << b["origin"].get<std::string>() << "), fitness " << format_number(b["fitness"])
      << "\n\ngenome: " << b["genome"].dump() << "\n\nintervention: `" << b["intervention"].dump() << "`\n";
  // The per-layer table only where the best sets per-layer RoPE scales (LPES,
  // PI): every other method's setting is the intervention line above.
  const json& scales = b["layer_scales"];
  if (!scales.empty()) {
    out << "\n## Decoded per-layer RoPE scales\n\n";
    rows.clear();
    if (scales.size() == 1) {
      rows.push_back({"all", scales[0].is_number() ? format_number(scales[0]) : scales[0].dump()});
    } else {
      for (size_t l = 0; l < scales.size(); ++l)
        rows.push_back({std::to_string(l), scales[l].is_number() ? format_number(scales[l]) : scales[l].dump()});
    }
    print_table(out, {"layer", "scale"}, rows);
  }
  out << "\n## Per-position scores of the best\n\n";
  rows.clear();
  for (const json& p : b["position_scores"])
    rows.push_back({format_number(p["position"]), format_number(p["accuracy"]), p["correct"].dump(),
                    p["samples"].dump()});
  print_table(out, {"gold position", "accuracy", "correct", "samples"}, rows);
  if (!r["pareto_front"].empty()) {
    out << "\n## Pareto front (nsga2; every objective maximised; held-out rows front-<candidate>)\n\n";
    Row header = {"candidate"};
    for (const auto& [name, value] : r["pareto_front"][0]["objectives"].items()) header.push_back(name);
    header.push_back("fitness");
    rows.clear();
    for (const json& m : r["pareto_front"]) {
      Row row = {m["candidate"].dump()};
      for (const auto& [name, value] : m["objectives"].items()) row.push_back(format_number(value, 4));
      row.push_back(m["fitness"].is_null() ? "-" : format_number(m["fitness"], 4));
      rows.push_back(row);
    }
    print_table(out, header, rows);
  }
  if (!r["heldout"].empty()) {
    out << "\n## Held-out accuracy by gold position (%)\n\n";
    print_side_by_side(r["heldout"], out);
    print_heldout_statistics(r["heldout_statistics"], out);
  }
}

// Long form: one row per value, so every section fits one CSV table.
void print_long_csv(const json& r, std::ostream& out) {
  std::vector<Row> rows;
  const json& model = r["provenance"]["model"];
  if (model.is_object())
    for (const auto& [field, value] : model.items())
      rows.push_back({"model", "", field, value.is_string() ? value.get<std::string>() : value.dump()});
  if (r["provenance"]["data"].is_string()) rows.push_back({"data", "", "contents", r["provenance"]["data"].get<std::string>()});
  for (const json& g : r["generations"])
    for (const char* field : {"best", "mean", "population", "evaluated", "from_cache", "raced"})
      rows.push_back({"generation", g["generation"].dump(), field,
                      g[field].is_number_float() ? format_number(g[field], 6) : g[field].dump()});
  for (const json& g : r["generations"])
    rows.push_back({"generation", g["generation"].dump(), "computed_on", g["computed_on"].get<std::string>()});
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
  for (const json& m : r["pareto_front"])
    for (const auto& [name, value] : m["objectives"].items())
      rows.push_back({"pareto_front", m["candidate"].dump(), name, format_number(value, 6)});
  append_heldout_csv_rows(r["heldout"], rows);
  if (r.contains("heldout_statistics")) append_heldout_statistics_csv_rows(r["heldout_statistics"], rows);
  print_csv(out, {"section", "index", "field", "value"}, rows);
}

}  // namespace

int print_report(const std::string& db_path, const std::string& experiment, const std::string& format,
                 std::ostream& out, std::ostream& err, const ReportOptions& options) {
  if (format != "md" && format != "json" && format != "csv" && format != "html") {
    err << "ga-run report: --format must be md, json, csv or html (got '" << format << "')\n";
    return 2;
  }
  try {
    const json report = build_report(db_path, experiment, options.check);
    std::ostringstream text;
    if (format == "json")
      text << report.dump(2) << '\n';
    else if (format == "csv")
      print_long_csv(report, text);
    else if (format == "html")
      text << html_report(report);
    else
      print_markdown(report, text);
    if (options.out_path.empty()) {
      out << text.str();
    } else {
      std::ofstream file(options.out_path, std::ios::trunc);
      if (!(file << text.str()) || !file.flush()) {
        err << "ga-run report: " << options.out_path << ": cannot write the report\n";
        return 1;
      }
      err << "report: " << options.out_path << '\n';
    }
    const std::string name = report["experiment"].get<std::string>();
    // The report is printed already. A plot that cannot be written beside the
    // database (a read-only results folder) is reported, not fatal; one that
    // cannot be written where --svg asked is a failure.
    const auto plot = [&](const std::string& beside, const std::string& asked, const auto& write) {
      const std::string path = asked.empty() ? beside : asked;
      try {
        write(path);
        err << "plot: " << path << '\n';
        return true;
      } catch (const std::exception& e) {
        if (!asked.empty()) {
          err << "ga-run report: " << e.what() << '\n';
          return false;
        }
        err << "plot: not written (" << e.what() << "); choose where with --svg PATH\n";
        return true;
      }
    };
    if (report["heldout"].empty()) {
      if (!options.svg_path.empty()) err << "plot: none (the experiment has no held-out results yet)\n";
    } else if (!plot(svg_beside(db_path, name, "heldout"), options.svg_path,
                     [&](const std::string& path) { write_heldout_svg(path, name, report["heldout"]); })) {
      return 1;
    }
    if (!report["pareto_front"].empty()) {
      const json names = report["search_config"].value("search", json::object()).value("objectives", json::array());
      // With --svg PATH the front goes beside it as <stem>-front.svg.
      std::string asked;
      if (!options.svg_path.empty()) {
        std::filesystem::path front_path(options.svg_path);
        front_path.replace_filename(front_path.stem().string() + "-front" + front_path.extension().string());
        asked = front_path.string();
      }
      if (!plot(svg_beside(db_path, name, "front"), asked, [&](const std::string& path) {
            write_front_svg(path, name, report["pareto_front"], names.get<std::vector<std::string>>());
          })) {
        return 1;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    err << "ga-run report: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace midtune::report
