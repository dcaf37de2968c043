#include "core/cli/status_command.hpp"

#include <algorithm>
#include <filesystem>

#include "core/report/provenance.hpp"
#include "core/report/table.hpp"
#include "schema/store.hpp"

namespace midtune::cli {

namespace {

// "host pid" of an unfinished run: false when it ran on this host and the
// process is gone (killed), so a fresh heartbeat does not read as running.
bool process_alive(const std::string& host_pid) {
  const auto space = host_pid.rfind(' ');
  if (space == std::string::npos) return true;  // cannot tell
  return !process_gone_on_this_host(host_pid.substr(0, space), std::stoll(host_pid.substr(space + 1)));
}

// Racing's next steps run ahead by evaluators that would otherwise wait
// (RunJob::speculative): how much, and what the work thrown away (runs of
// candidates the look dropped, failed runs) cost, as a share of all
// evaluator time (`evaluator_seconds`).
void print_speculation(std::ostream& out, const nlohmann::json& s, double evaluator_seconds) {
  if (s.value("units", 0) == 0) return;
  const auto discarded = s.value("discarded_prompts", 0);
  const double wasted = s.value("discarded_seconds", 0.0);
  out << "  speculation: " << s.value("units", 0) << " units (" << s.value("prompts", 0)
      << " prompts) of racing's next steps run by otherwise idle evaluators: " << s.value("used_prompts", 0)
      << " prompts used, " << discarded << " discarded (" << report::format_number(wasted, 1) << " s, "
      << report::format_number(evaluator_seconds > 0 ? 100.0 * wasted / evaluator_seconds : 0.0, 1)
      << " % of evaluator time)\n";
}

// An MPI run's evaluator ranks (Backend::workers()): where each runs, what
// it answered, and the fraction of the time it waited for a unit (racing's
// looks, the end of a generation, the driver storing results).
void print_workers(std::ostream& out, const nlohmann::json& workers) {
  const nlohmann::json ranks = workers.value("ranks", nlohmann::json::array());
  double busy = 0.0, seconds = workers.value("seconds", 0.0);
  std::vector<report::Row> rows;
  for (const nlohmann::json& r : ranks) {
    busy += r.value("busy_seconds", 0.0);
    rows.push_back({std::to_string(r.value("rank", 0)), r.value("host", std::string("?")),
                    r.value("device", std::string("?")), std::to_string(r.value("units", 0)),
                    std::to_string(r.value("prompts", 0)), report::format_number(r.value("busy_seconds", 0.0), 1),
                    report::format_number(100.0 * r.value("idle_fraction", 0.0), 1) + " %"});
  }
  const double idle = ranks.empty() || seconds <= 0 ? 0.0 : 1.0 - busy / (seconds * static_cast<double>(ranks.size()));
  out << "  " << ranks.size() << " evaluator ranks, units of " << workers.value("unit_prompts", 0) << " prompts, over "
      << report::format_number(seconds, 1) << " s: evaluators waited " << report::format_number(100.0 * std::max(0.0, idle), 1)
      << " % of the time\n";
  report::print_table(out, {"rank", "host", "device", "units", "prompts", "busy s", "waited"}, rows);
  print_speculation(out, workers.value("speculative", nlohmann::json::object()), seconds * ranks.size());
}

}  // namespace

int print_status(const std::string& db_path, std::ostream& out, std::ostream& err, Store::Check check) {
  if (!std::filesystem::exists(db_path)) {  // a FIFO or a directory is refused by name when opened
    err << "ga-run status: " << db_path << ": no such database file\n";
    return 1;
  }
  try {
    Store store(db_path, Store::Access::read_only, check);
    const StoreTotals totals = store.totals();
    out << db_path << ": schema v" << store.schema_version() << ", " << totals.evaluations_ok
        << " evaluations cached (" << totals.evaluations_failed << " failed"
        << (totals.evaluations_partial > 0 ? ", " + std::to_string(totals.evaluations_partial) + " partial (raced)" : "")
        << "), " << totals.sample_results << " sample results\n";
    std::vector<report::Row> rows;
    for (const ExperimentStatus& e : store.experiment_statuses()) {
      std::string last_run = e.last_run.value_or("never run");
      if (e.lease && e.lease->alive())  // the owner's lease, not the run rows, says who runs it now
        last_run = "running (" + e.lease->host + " pid " + std::to_string(e.lease->pid) + " since " +
                   e.lease->started_at + ", heartbeat " + e.lease->heartbeat_at + ")";
      else if (e.unfinished_run && last_run.rfind("running", 0) == 0 && !process_alive(*e.unfinished_run))
        last_run.replace(0, 7, "stopped");
      // Forward passes (prompts; one forward pass each under teacher forcing):
      // every individual on the whole split would cost individuals x split;
      // racing saved what its dropped children did not see, the cache the rest
      // of what no run had to make.
      // A race in flight has stored (and counted) slices before its individual
      // exists; until it does, the difference would read negative.
      // Before any individual has the whole split its size is unknown: "-".
      const auto run = static_cast<std::int64_t>(e.prompts);
      const bool split_known = e.split_samples > 0 || e.individuals == 0;
      const std::int64_t saved_by_cache =
          std::max<std::int64_t>(0, e.individuals * e.split_samples - run - e.saved_by_racing);
      rows.push_back({e.name, std::to_string(e.generations), std::to_string(e.individuals),
                      std::to_string(e.evaluated), std::to_string(e.from_cache), std::to_string(e.raced),
                      std::to_string(run), split_known ? std::to_string(saved_by_cache) : "-",
                      split_known ? std::to_string(e.saved_by_racing) : "-",
                      e.best_fitness ? report::format_number(*e.best_fitness) : "-",
                      e.backend_seconds > 0 ? report::format_number(e.prompts / e.backend_seconds, 1) : "-",
                      std::to_string(e.runs), last_run});
    }
    report::print_table(out,
                {"experiment", "generations done", "individuals", "evaluated", "from cache", "raced", "passes run",
                 "passes saved by cache", "passes saved by racing", "best fitness", "prompts/s", "runs", "last run"},
                rows);
    // What each experiment ran on, so that two results files (or two
    // experiments of one file) on different weights are told apart.
    for (const ExperimentRecord& e : store.experiments()) {
      out << e.name << ": " << report::provenance_text(report::provenance_json(e.search_config)) << '\n';
      const std::vector<RunProvenance> runs = store.run_provenances(e.id);
      if (runs.empty()) continue;
      out << "  last run: " << report::run_text(runs.back().provenance) << '\n';
      if (runs.back().workers.is_object()) print_workers(out, runs.back().workers);
    }
    return 0;
  } catch (const std::exception& e) {
    err << "ga-run status: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace midtune::cli
