#include "core/cli/commands.hpp"

#include <CLI/CLI.hpp>

#include "backends/synthetic/synthetic_test_double.hpp"
#include "core/cli/engine_commands.hpp"
#include "core/cli/eval_command.hpp"
#include "core/cli/mpi_run.hpp"
#include "core/cli/phs_search_command.hpp"
#include "core/cli/progress.hpp"
#include "core/cli/query_command.hpp"
#include "core/report/experiment_report.hpp"
#include "core/cli/run_setup.hpp"
#include "core/cli/status_command.hpp"
#include "core/cli/stop_signals.hpp"
#include "core/report/table.hpp"
#include "core/experiment/experiment.hpp"
#include "core/experiment/experiment_name.hpp"
#include "core/parallel/ranks.hpp"
#include "schema/store.hpp"

namespace midtune::cli {

namespace {

void warn_if_test_double(const Experiment& e, std::ostream& err) {
  if (e.backend.kind == SyntheticTestDoubleBackend::kKind)
    err << "note: backend '" << e.backend.kind
        << "' is a deterministic test double, not a model; its scores say nothing about any model\n";
}

}  // namespace

int run_experiment(const RunRequest& request, std::ostream& out, std::ostream& err) {
  if (parallel::launcher_world_size() > 1) return run_on_ranks(request, out, err);
  install_stop_handlers();
  return run_experiment_with(
      request, [](const Experiment& e, const std::string& name) { return prepare_search(e, name); }, out, err);
}

int run_experiment_with(const RunRequest& request, const PrepareSearch& prepare, std::ostream& out,
                        std::ostream& err) {
  std::unique_ptr<PreparedSearch> prepared;
  Experiment experiment;
  try {
    experiment = load_experiment(request.experiment_file);
    if (!request.device.empty()) move_to_device(experiment, request.device);
    prepared = prepare(experiment, request.new_experiment.empty() ? experiment.name : request.new_experiment);
  } catch (const ConfigError& e) {
    err << "ga-run: " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::invalid_argument& e) {
    err << "ga-run: " << request.experiment_file << ": " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "ga-run: " << request.experiment_file << ": " << e.what() << '\n';
    return kExitFailure;
  }
  const std::string db = request.db.empty() ? experiment.storage.db.string() : request.db;
  prepared->inputs.stop_signal = &stop_request();
  try {
    if (!request.quiet) warn_if_test_double(experiment, err);
    Store store(db, Store::Access::read_write, request.integrity_check ? Store::Check::full : Store::Check::quick);
    // Held until `store` closes: the search and its held-out step.
    if (const auto replaced = store.acquire_lease(prepared->inputs.experiment_name,
                                                  {request.lease_timeout_seconds, request.takeover}))
      err << "ga-run: took over the lease of pid " << replaced->pid << " on host " << replaced->host
          << " (last heartbeat " << replaced->heartbeat_at << ")\n";
    Progress progress(err, Progress::detect(request.quiet));
    progress.message("experiment '" + prepared->inputs.experiment_name + "' -> " + db + " (" +
                     std::to_string(prepared->inputs.items.size()) + " search prompts per evaluation)");
    const RunSummary s = run_search(store, prepared->inputs, progress);
    if (s.already_complete) out << "experiment '" << prepared->inputs.experiment_name << "' is already complete\n";
    out << "done: " << s.generations_done << " generations this run, " << s.evaluated << " evaluated, "
        << s.cache_hits << " from cache, "
        << (s.raced > 0 ? std::to_string(s.raced) + " dropped by racing, " : std::string())
        << s.resumed_individuals << " resumed; best fitness "
        << report::format_number(s.best_fitness) << " (candidate " << s.best_candidate << ")\n"
        << "report: ga-run report " << db << " --experiment " << prepared->inputs.experiment_name << '\n';
    if (stop_request().load() != 0) throw RunStopped("before the held-out step");
    progress.message("held-out: best, baseline, PI at the mean scale / the paper default");
    run_heldout_step(store, experiment, *prepared, s.experiment_id, out);
    return kExitOk;
  } catch (const ResumeRefused& e) {
    err << "ga-run: " << e.what() << '\n';
    return kExitUsage;
  } catch (const LeaseHeld& e) {
    err << "ga-run: " << e.what() << '\n';
    return kExitBusy;
  } catch (const RunStopped& e) {
    // The store is closed by now: the lease is released for the next run.
    err << "ga-run: " << stop_signal_name() << ": stopped " << e.what() << "; every finished evaluation is in "
        << db << "; run the same command to resume (exit " << kExitStopped << ")\n";
    return kExitStopped;
  } catch (const sql::WaitStopped&) {
    err << "ga-run: " << stop_signal_name() << ": stopped while waiting for another process's write to " << db
        << " to end; every finished evaluation is in it; run the same command to resume (exit " << kExitStopped
        << ")\n";
    return kExitStopped;
  } catch (const std::exception& e) {
    err << "ga-run: " << e.what() << '\n';
    return kExitFailure;
  }
}

int validate_experiment(const std::string& file, std::ostream& out, std::ostream& err) {
  try {
    const Experiment e = load_experiment(file);
    require_input_files(e);
    std::string extra;
    if (e.backend.kind != "server") {
      // The objective, the strategy, the search split and every gene's range
      // against the model (the engine loads it; a server is only asked at run time).
      auto prepared = prepare_search(e, e.name);
      prepared->inputs.make_strategy();
      extra = ", " + std::to_string(prepared->inputs.items.size()) + " search prompts, " +
              std::to_string(prepared->objective->space().size()) + " genes";
    }
    if (e.search.racing)
      extra += ", racing " + e.to_json()["search"]["racing"].dump();
    out << file << ": ok (experiment '" << e.name << "', backend " << e.backend.kind << ", dataset "
        << e.dataset.kind << ", objective " << e.objective.kind << ", search " << e.search.strategy << extra
        << ", db " << e.storage.db.string() << ")\n";
    return kExitOk;
  } catch (const ConfigError& e) {
    err << "ga-run: " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::invalid_argument& e) {
    err << "ga-run: " << file << ": " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "ga-run: " << file << ": " << e.what() << '\n';
    return kExitFailure;
  }
}

int ga_run_main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"ga-run: search inference-time settings that make a model use the middle of its context.\n"
               "  ga-run EXPERIMENT.yaml    run, or resume after an interruption (same command)",
               "ga-run"};
  app.require_subcommand(0, 1);
  RunRequest run;
  app.add_option("experiment", run.experiment_file, "Experiment file (YAML) to run or resume");
  app.add_option("--db", run.db, "Results database (default: storage.db of the file, results.db beside it)");
  app.add_flag("-q,--quiet", run.quiet, "No progress output");
  app.add_option("--new-experiment", run.new_experiment,
                 "Run under this experiment name instead of the file's (a fresh search in the same database)")
      ->check(CLI::Validator(
          [](std::string& name) {
            const std::string problem = experiment_name_problem(name);
            return problem.empty() ? problem : "the experiment name " + problem;
          },
          "NAME"));
  app.add_option("--device", run.device,
                 "cpu | cuda: run the file's engine on this device instead of its backend.device; the device is "
                 "part of the search, so a resume names the same one");
  app.add_flag("--takeover", run.takeover,
               "Take the experiment over from the process that holds it (after that process died on another host)");
  app.add_option("--lease-timeout", run.lease_timeout_seconds,
                 "Seconds without a heartbeat after which another ga-run may take this run's experiment over "
                 "(default 900; every evaluation's commit is a heartbeat)")
      ->check(CLI::PositiveNumber);
  app.add_option("--unit-prompts", run.unit_prompts,
                 "Under mpirun/srun: prompts per unit of work an evaluator rank takes (default " +
                     std::to_string(parallel::kDefaultUnitPrompts) +
                     "); the same value gives the same results for any number of ranks")
      ->check(CLI::Range(1, 1024));
  app.add_option("--unit-timeout", run.unit_timeout_s,
                 "Under mpirun/srun: seconds an evaluator rank may take for one unit before the job ends as "
                 "failed, for a rank that hangs (default 0: no deadline; a rank that dies ends the job anyway)")
      ->check(CLI::Range(0.0, 1e7));
  bool integrity_check = false;
  app.add_flag("--integrity-check", integrity_check,
               "Check the database with the full PRAGMA integrity_check when opening it (default: quick_check)");

  std::string file, db, sql_text, experiment_name, format = "md";
  CLI::App* validate = app.add_subcommand("validate", "Check an experiment file and exit");
  validate->add_option("experiment", file, "Experiment file (YAML)")->required();
  CLI::App* status = app.add_subcommand("status", "Experiments, generations, evaluations, cache savings, prompts/s");
  status->add_option("db", db, "Results database")->required();
  status->add_flag("--integrity-check", integrity_check, "Full PRAGMA integrity_check (default: quick_check)");
  CLI::App* report = app.add_subcommand("report", "Per-generation best/mean, best genome, its scales and scores");
  report->add_option("db", db, "Results database")->required();
  report->add_option("--experiment", experiment_name, "Experiment name (default: the latest)");
  report->add_option("--format", format, "md | json | csv | html (one self-contained page with the plots)")
      ->check(CLI::IsMember({"md", "json", "csv", "html"}));
  std::string report_out;
  report->add_option("--out", report_out, "Write the report to this file instead of standard output");
  std::string svg_path;
  report->add_option("--svg", svg_path, "Write the held-out plot here (default: <experiment>-heldout.svg beside the database); an nsga2 front goes beside it as <stem>-front.svg");
  report->add_flag("--integrity-check", integrity_check, "Full PRAGMA integrity_check (default: quick_check)");
  CLI::App* query = app.add_subcommand("query", "Run one read-only SQL statement and print the rows");
  query->add_option("db", db, "Results database")->required();
  query->add_option("sql", sql_text, "One SQL statement (read-only)")->required();
  QueryLimits query_limits;
  query->add_option("--timeout", query_limits.timeout_seconds,
                    "Stop the statement after this many seconds (default 60; 0: no limit)")
      ->check(CLI::NonNegativeNumber);
  query->add_option("--max-rows", query_limits.max_rows,
                    "Print at most this many rows, then say the output was cut (default 10000; 0: no limit)")
      ->check(CLI::NonNegativeNumber);

  EvalRequest eval_request;
  CLI::App* eval = add_eval_command(app, eval_request);
  PhsSearchArgs phs_args;
  CLI::App* phs_search = add_phs_search_command(app, phs_args);

  // generate, bench-model: run by their CLI11 callbacks during parse().
  add_engine_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err) == 0 ? kExitOk : kExitUsage;
  } catch (const std::exception& e) {
    err << "ga-run: " << e.what() << '\n';
    return kExitFailure;
  }
  if (*validate) return validate_experiment(file, out, err);
  const Store::Check check = integrity_check ? Store::Check::full : Store::Check::quick;
  if (*status) return print_status(db, out, err, check);
  if (*report) return report::print_report(db, experiment_name, format, out, err, {svg_path, check, report_out});
  if (*query) return run_query(db, sql_text, out, err, query_limits);
  if ((*eval || *phs_search) && parallel::launcher_world_size() > 1) {
    // Every rank would run the whole command and write the same database.
    err << "ga-run: " << (*eval ? "eval" : "phs-search")
        << " runs as one process: start it without mpirun or srun (a search, ga-run EXPERIMENT.yaml, is what "
           "uses MPI ranks)\n";
    return kExitUsage;
  }
  if (*eval) return run_eval(eval_request, out, err);
  if (*phs_search) return run_phs_search(phs_args, out, err);
  if (!app.get_subcommands().empty()) return kExitOk;  // an engine command ran
  if (run.experiment_file.empty()) {
    err << app.help() << "\nga-run: an experiment file or a command is required\n";
    return kExitUsage;
  }
  run.integrity_check = integrity_check;
  return run_experiment(run, out, err);
}

}  // namespace midtune::cli
