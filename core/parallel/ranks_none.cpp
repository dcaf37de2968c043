// A build without MPI: no ranks; ga-run runs as one process.
#include "core/parallel/ranks.hpp"

namespace midtune::parallel {

namespace {
[[noreturn]] void no_mpi() {
  throw std::runtime_error(
      "this ga-run was built without MPI (CMake found no MPI library, or -DMIDTUNE_MPI=OFF); install Open MPI "
      "(openmpi-bin, libopenmpi-dev) and build again, or run ga-run without a launcher");
}
}  // namespace

bool mpi_built() { return false; }

RankSession::RankSession() { no_mpi(); }
RankSession::~RankSession() = default;
void RankSession::abort(int) { no_mpi(); }
void RankSession::send_setup(const nlohmann::json&) { no_mpi(); }
std::unique_ptr<Backend> RankSession::connect_evaluators(std::size_t, double, const std::atomic<int>*) { no_mpi(); }
void RankSession::stop_evaluators(const std::string&, int) { no_mpi(); }
std::optional<nlohmann::json> RankSession::receive_setup() { no_mpi(); }
std::string RankSession::serve(Backend*, const std::string&, const std::string&) { no_mpi(); }

}  // namespace midtune::parallel
