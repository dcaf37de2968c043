#include "core/cli/mpi_run.hpp"

#include <cstdlib>
#include <string>
#include <thread>

#include "core/cli/stop_signals.hpp"
#include "core/experiment/experiment.hpp"
#include "core/parallel/ranks.hpp"

namespace midtune::cli {

namespace {

using nlohmann::json;

std::string where(const parallel::RankPlace& place) {
  return "rank " + std::to_string(place.rank) + " on host " + place.host;
}

// True when CUDA_VISIBLE_DEVICES names exactly one GPU (Slurm's
// --gpus-per-task=1 and similar): that GPU is this rank's device 0.
bool one_visible_gpu() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value != nullptr && *value != '\0' && std::string(value).find(',') == std::string::npos;
}

// The experiment's backend as this evaluator builds it: the CPU engine
// with the host's cores shared among the evaluators on it (when the file
// says threads: 0, all cores), a GPU per evaluator on the host (by node-local
// rank, after the file's gpu), and the test hook's model file.
std::string place_backend(BackendConfig& backend, const parallel::RankPlace& place, bool driver_here) {
  const int evaluators_here = std::max(1, place.local_size - (driver_here ? 1 : 0));
  const int local_index = std::max(0, place.local_rank - (driver_here ? 1 : 0));
  if (const auto model = parallel::test_model_override(place.rank)) backend.model = *model;
  if (backend.kind != "engine") return backend.kind;
  if (backend.device == "cuda") {
    if (!one_visible_gpu()) backend.gpu += local_index;
    return "cuda GPU " + std::to_string(backend.gpu);
  }
  if (backend.threads == 0)
    backend.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / evaluators_here);
  return "cpu, " + std::to_string(backend.threads) + (backend.threads == 1 ? " thread" : " threads");
}

int evaluate(parallel::RankSession& session, std::ostream& err) {
  const parallel::RankPlace& place = session.place();
  const std::optional<json> setup = session.receive_setup();
  if (!setup) return kExitOk;  // the driver stopped first and says why
  std::unique_ptr<Backend> backend;
  std::string error, device;
  try {
    Experiment e = parse_experiment(setup->at("experiment_text").get<std::string>(),
                                    setup->at("experiment_file").get<std::string>());
    device = place_backend(e.backend, place, setup->at("driver_host").get<std::string>() == place.host);
    backend = make_backend(e);
  } catch (const std::exception& e) {
    error = e.what();
    err << ("ga-run: " + where(place) + ": could not build the backend: " + error + "\n") << std::flush;
  }
  const std::string reason = session.serve(backend.get(), error, device);
  // One write per line: the launcher merges every rank's standard error.
  if (!reason.empty()) err << ("ga-run: " + where(place) + " stopped: " + reason + "\n") << std::flush;
  return kExitOk;
}

int drive(parallel::RankSession& session, const RunRequest& request, std::ostream& out, std::ostream& err) {
  const parallel::RankPlace& place = session.place();
  const std::size_t unit_prompts = request.unit_prompts > 0 ? request.unit_prompts : parallel::kDefaultUnitPrompts;
  const int code = run_experiment_with(
      request,
      [&](const Experiment& e, const std::string& name) {
        session.send_setup(
            {{"experiment_text", e.text}, {"experiment_file", e.file.string()}, {"driver_host", place.host}});
        auto backend = session.connect_evaluators(unit_prompts, request.unit_timeout_s, &stop_request());
        if (!request.quiet)
          err << "ga-run: driver " << where(place) << ", " << place.size - 1 << " evaluator ranks, units of "
              << unit_prompts << " prompts\n";
        return prepare_search(e, name, datasets::Split::search, std::move(backend));
      },
      out, err);
  // Units a stop could not wait for end the job with the stop's status: the
  // lease is released and everything finished stored by now.
  session.stop_evaluators(code == kExitOk ? ""
                                          : "the driver (" + where(place) + ") ended with exit status " +
                                                std::to_string(code),
                          code == kExitStopped ? kExitStopped : kExitFailure);
  return code;
}

}  // namespace

int run_on_ranks(const RunRequest& request, std::ostream& out, std::ostream& err) {
  if (!parallel::mpi_built()) {
    err << "ga-run: started by an MPI launcher with " << parallel::launcher_world_size()
        << " processes, but this ga-run was built without MPI (CMake found no MPI library, or -DMIDTUNE_MPI=OFF); "
           "install openmpi-bin and libopenmpi-dev and build again, or run ga-run without a launcher\n";
    return kExitUsage;
  }
  std::unique_ptr<parallel::RankSession> session;
  try {
    session = std::make_unique<parallel::RankSession>();
  } catch (const std::exception& e) {
    err << "ga-run: " << e.what() << '\n';
    return kExitFailure;
  }
  // The launcher (mpirun, srun, Slurm's preemption) signals every rank; the
  // driver alone decides how the job stops.
  if (session->is_driver())
    install_stop_handlers();
  else
    ignore_stop_signals();
  try {
    return session->is_driver() ? drive(*session, request, out, err) : evaluate(*session, err);
  } catch (const std::exception& e) {
    // An MPI failure: this rank can no longer tell the others to stop, so
    // it ends the job rather than leave them waiting.
    err << "ga-run: " << where(session->place()) << ": " << e.what() << "; ending every rank\n";
    err.flush();
    session->abort(kExitFailure);
  }
}

}  // namespace midtune::cli
