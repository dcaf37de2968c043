// What ga-run reads from a launcher's environment before it decides to start
// MPI: the world size (1 without a launcher) and the per-rank model test hook.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/parallel/ranks.hpp"

namespace midtune::parallel {
namespace {

class LauncherEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) unsetenv(name);
  }
  void TearDown() override {
    for (const char* name : kVariables) unsetenv(name);
  }
  static constexpr const char* kVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS",
                                               kTestModelOverrideEnv};
};

TEST_F(LauncherEnvironment, WorldSizeIsOneWithoutALauncher) { EXPECT_EQ(launcher_world_size(), 1); }

TEST_F(LauncherEnvironment, WorldSizeComesFromOpenMpiMpichOrSlurm) {
  setenv("OMPI_COMM_WORLD_SIZE", "5", 1);
  EXPECT_EQ(launcher_world_size(), 5);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("PMI_SIZE", "3", 1);
  EXPECT_EQ(launcher_world_size(), 3);
  unsetenv("PMI_SIZE");
  setenv("SLURM_STEP_NUM_TASKS", "9", 1);
  EXPECT_EQ(launcher_world_size(), 9);
  setenv("SLURM_STEP_NUM_TASKS", "many", 1);  // not a launcher's value: ignored
  EXPECT_EQ(launcher_world_size(), 1);
}

TEST_F(LauncherEnvironment, ModelOverrideAppliesToItsRankOnly) {
  EXPECT_FALSE(test_model_override(2));
  setenv(kTestModelOverrideEnv, "2:/models/other.gguf", 1);
  EXPECT_EQ(test_model_override(2), std::filesystem::path("/models/other.gguf"));
  EXPECT_FALSE(test_model_override(1));
  EXPECT_FALSE(test_model_override(0));
}

TEST_F(LauncherEnvironment, MalformedModelOverrideIsRefusedNamingTheVariable) {
  for (const char* bad : {"/models/other.gguf", "2:", ":x.gguf", "two:x.gguf", "2x:x.gguf"}) {
    setenv(kTestModelOverrideEnv, bad, 1);
    try {
      test_model_override(2);
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(kTestModelOverrideEnv), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace midtune::parallel
