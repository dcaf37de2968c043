// What ga-run reads from the launcher's environment, in every build.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/parallel/ranks.hpp"

namespace midtune::parallel {

int launcher_world_size() {
  // Open MPI's mpirun, MPICH's (Hydra) mpiexec and Slurm's PMI, srun's step.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    try {
      return std::max(1, std::stoi(value));
    } catch (const std::exception&) {
      continue;  // not a number: not a launcher's variable
    }
  }
  return 1;
}

std::optional<std::filesystem::path> test_model_override(int rank) {
  const char* value = std::getenv(kTestModelOverrideEnv);
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string text = value;
  const std::size_t colon = text.find(':');
  std::size_t used = 0;
  int which = -1;
  try {
    which = std::stoi(text.substr(0, colon), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (colon == std::string::npos || colon == 0 || used != colon || colon + 1 == text.size())
    throw std::invalid_argument(std::string(kTestModelOverrideEnv) + "='" + text +
                                "': expected RANK:MODEL_PATH (a test hook)");
  if (which != rank) return std::nullopt;
  return std::filesystem::path(text.substr(colon + 1));
}

}  // namespace midtune::parallel
