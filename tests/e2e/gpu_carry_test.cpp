// scripts/gpu_carry.sh, the only way a real model reaches a lent GPU
// machine (no network there, 64 MiB a call): the file cut into parts here,
// joined there into the model cache and checked against the sha256 pinned
// in scripts/fetch_real_model.sh. That path runs once per GPU session, with
// no second chance: here, on the test model (98 MB, two parts), a missing
// part is named and nothing is joined, and the whole set joins back into
// the pinned file, which fetch_real_model.sh --cached then finds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/subprocess.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/engine/model_path.hpp"
#include "tests/test_paths.hpp"

namespace midtune::testing {
namespace {

namespace fs = std::filesystem;

class GpuCarry : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    if (test_model_path().empty()) GTEST_SKIP() << "model not found (set MIDTUNE_MODEL)";
    // The split reads the model from a cache of its own: a copy (the script
    // checks size and sha256, which a symbolic link's size would fail).
    fs::create_directories(path("here-cache"));
    fs::copy_file(test_model_path(), path("here-cache/SmolLM2-135M-Instruct.Q4_1.gguf"));
  }
  // scripts/gpu_carry.sh ACTION smollm2-135m with the parts in DIR/parts and
  // the model cache `cache`.
  Finished carry(const std::string& action, const std::string& cache) {
    return run_process({"/usr/bin/env", "MIDTUNE_CACHE=" + path(cache), "GPU_CARRY_DIR=" + path("parts"),
                        source_dir() + "/scripts/gpu_carry.sh", action, "smollm2-135m"},
                       dir_.string());
  }
};

TEST_F(GpuCarry, PartsJoinIntoThePinnedFileAndAMissingPartIsNamed) {
  const Finished split = carry("split", "here-cache");
  ASSERT_EQ(split.exit_code, 0) << split.err;
  const std::string part0 = path("parts/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf.part-00-of-02");
  const std::string part1 = path("parts/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf.part-01-of-02");
  ASSERT_TRUE(fs::exists(part0) && fs::exists(part1)) << split.out << split.err;
  EXPECT_EQ(fs::file_size(part0), 56u << 20) << "parts of 56 MiB: one a call with the working tree";
  EXPECT_NE(split.out.find(part1), std::string::npos) << "the paths to carry are listed";

  // "There": an empty cache, one part still to come.
  fs::rename(part1, path("part1-in-transit"));
  const Finished have = carry("have", "there-cache");
  EXPECT_EQ(have.exit_code, 0) << have.err;
  EXPECT_NE(have.out.find("1 of 2 parts here; missing: 1"), std::string::npos) << have.out;
  const Finished early = carry("join", "there-cache");
  EXPECT_EQ(early.exit_code, 1);
  EXPECT_NE(early.err.find("parts 1 of 2 have not arrived"), std::string::npos) << early.err;
  EXPECT_FALSE(fs::exists(path("there-cache/SmolLM2-135M-Instruct.Q4_1.gguf")));

  fs::rename(path("part1-in-transit"), part1);
  const Finished joined = carry("join", "there-cache");
  ASSERT_EQ(joined.exit_code, 0) << joined.err;
  EXPECT_EQ(joined.out, path("there-cache/SmolLM2-135M-Instruct.Q4_1.gguf") + "\n");
  EXPECT_EQ(fs::file_size(path("there-cache/SmolLM2-135M-Instruct.Q4_1.gguf")), fs::file_size(test_model_path()));

  // A part damaged on the way: joined, refused by the pinned sha256, named.
  {
    std::fstream damaged(part0, std::ios::in | std::ios::out | std::ios::binary);
    damaged.seekp(1000);
    damaged.put('\x5a');
  }
  fs::remove(path("there-cache/SmolLM2-135M-Instruct.Q4_1.gguf"));
  const Finished bad = carry("join", "there-cache");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("expected 98362432 bytes, sha256 b179c952"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace midtune::testing
