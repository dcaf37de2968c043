// One search on many processes: `mpirun -n N ga-run EXPERIMENT.yaml` or
// `srun ga-run EXPERIMENT.yaml` (docs/design.md "Ranks"). Rank 0 is the
// driver: it runs the search as a single ga-run does, through a Backend that
// cuts every batch into units of a fixed number of prompts and hands them to
// whichever evaluator is idle. Ranks 1..N-1 are evaluators: each builds the
// experiment's backend and answers units until the driver stops it.
//
// Units travel as the server protocol's evaluate request and reply
// (backends/server/PROTOCOL.md), as JSON text in MPI messages, and each
// evaluator introduces itself with the protocol's info: the driver refuses
// to start when any evaluator runs another model, precision or device kind.
//
// This header is the same with and without MPI; a build without MPI has
// mpi_built() false and refuses to start a RankSession.
#pragma once

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"

namespace midtune::parallel {

// Whether this build has MPI evaluator ranks (CMake option MIDTUNE_MPI and
// an MPI library found).
bool mpi_built();

// How many processes an MPI launcher started this one among, from the
// launcher's environment (Open MPI's mpirun, MPICH's mpiexec, Slurm's srun),
// without initialising MPI; 1 when no launcher started it.
int launcher_world_size();

// TEST HOOK, not a user setting: "R:PATH" makes rank R build its backend on
// the model file PATH instead of backend.model, so a test can give one
// evaluator another model and see it refused.
inline constexpr const char* kTestModelOverrideEnv = "MIDTUNE_TEST_MODEL_OVERRIDE_RANK";
// The override for `rank` from kTestModelOverrideEnv, if any. Throws
// std::invalid_argument for a value that is not "R:PATH".
std::optional<std::filesystem::path> test_model_override(int rank);

// Prompts per unit when the command line does not say: small enough that a
// search split of a few dozen prompts keeps several evaluators busy, large
// enough that the engine's shared prompt prefix is computed once for several
// prompts.
inline constexpr std::size_t kDefaultUnitPrompts = 8;

// Asked to stop (SIGTERM), the driver sends no new unit and waits this long
// for the units in flight when --unit-timeout does not say: well inside the
// 120 s that the Slurm script's --signal leaves before the job is killed.
inline constexpr double kStopGraceSeconds = 60;

// Where a rank runs.
struct RankPlace {
  int rank = 0;
  int size = 1;
  std::string host;
  int local_rank = 0;  // among the ranks on the same host
  int local_size = 1;
};

// The driver cannot start: an evaluator could not build its backend, or
// evaluators run different models. Nothing was evaluated.
struct EvaluatorsRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// MPI_Init .. MPI_Finalize of one ga-run process among its ranks. Every MPI
// call returns its error (MPI_ERRORS_RETURN) and throws std::runtime_error
// here rather than aborting without a word; waiting ranks poll and sleep, so
// an idle evaluator or a waiting driver costs no CPU.
class RankSession {
 public:
  // Throws std::runtime_error in a build without MPI, or when MPI cannot start.
  RankSession();
  ~RankSession();
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;

  const RankPlace& place() const { return place_; }
  bool is_driver() const { return place_.rank == 0; }
  // Ends every rank of the job with `code` (MPI_Abort): for failures after
  // which the ranks can no longer be told to stop.
  [[noreturn]] void abort(int code);

  // --- the driver (rank 0) ---
  // Sends every evaluator what it needs to build the backend.
  void send_setup(const nlohmann::json& setup);
  // Waits for every evaluator's introduction and returns the Backend that
  // dispatches units of `unit_prompts` prompts to them; it must not outlive
  // this session. An evaluator that has not answered a unit after
  // `unit_timeout_s` seconds (0: no deadline) fails the run and the job
  // ends. Once `stop` is non-zero (a signal asked the driver to stop), a
  // run() sends no new unit, waits for those in flight (at most
  // `unit_timeout_s`, or kStopGraceSeconds without one) and, with units left
  // unsent, throws RunStopped. Throws EvaluatorsRefused naming the rank and
  // host of every evaluator that failed or differs from rank 1 (whose
  // identity is then the search's model identity).
  std::unique_ptr<Backend> connect_evaluators(std::size_t unit_prompts, double unit_timeout_s = 0,
                                              const std::atomic<int>* stop = nullptr);
  // Tells every evaluator to end; `reason` (empty after a finished search)
  // goes to their standard error. When the dispatch backend failed with
  // units still out (an MPI or protocol failure, not a backend error, or a
  // stop whose units did not come back in time), ends every rank instead
  // with MPI_Abort(`abort_code`), since those evaluators cannot be stopped.
  void stop_evaluators(const std::string& reason, int abort_code = 1);

  // --- an evaluator (rank > 0) ---
  // The driver's setup, or nullopt when the driver stopped before sending one.
  std::optional<nlohmann::json> receive_setup();
  // Introduces this rank to the driver (its backend's identity, or
  // `build_error` when backend is null), then evaluates units until the
  // driver stops it; returns the driver's reason for stopping (empty after a
  // finished search). `device` says where the backend computes (for messages).
  std::string serve(Backend* backend, const std::string& build_error, const std::string& device);

 private:
  RankPlace place_;
  bool units_lost_ = false;  // set by the dispatch backend
};

}  // namespace midtune::parallel
