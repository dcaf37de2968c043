// `ga-run phs-search` refuses bad arguments before any model work, with a
// message naming the option or file and exit status 2 (usage/configuration).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/cli/commands.hpp"
#include "tests/cli/temp_dir.hpp"
#include "tests/test_paths.hpp"

namespace midtune::cli {
namespace {

// A file that exists wherever the tests are built (__FILE__ is relative under
// compiler caches that rewrite paths): the argument checks run before it is read.
const std::string kAnyExistingFile = midtune::testing::source_dir() + "/tests/phs/phs_search_cli_test.cpp";

struct Outcome {
  int code = -1;
  std::string out, err;
};

Outcome ga_run(std::vector<std::string> args) {
  args.insert(args.begin(), "ga-run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  Outcome o;
  o.code = ga_run_main(static_cast<int>(argv.size()), argv.data(), out, err);
  o.out = out.str();
  o.err = err.str();
  return o;
}

class PhsSearchCli : public testing::TempDirTest {};

TEST_F(PhsSearchCli, TopKBelowOneIsAUsageError) {
  // Any existing file passes --model's existence check; K is refused first.
  const Outcome o = ga_run({"phs-search", "--model", kAnyExistingFile, "--top-k", "0", "--db", path("r.db")});
  EXPECT_EQ(o.code, kExitUsage);
  EXPECT_NE(o.err.find("--top-k"), std::string::npos) << o.err;
}

TEST_F(PhsSearchCli, MissingModelIsAUsageError) {
  const Outcome o = ga_run({"phs-search", "--model", path("absent.gguf"), "--db", path("r.db")});
  EXPECT_EQ(o.code, kExitUsage);
  EXPECT_NE(o.err.find("absent.gguf"), std::string::npos) << o.err;
}

TEST_F(PhsSearchCli, CorruptModelIsAUsageErrorNamingTheFile) {
  const std::string model = path("corrupt.gguf");
  std::ofstream(model) << "GGUF but not really a model";
  const Outcome o = ga_run({"phs-search", "--model", model, "--db", path("r.db"), "--quiet"});
  EXPECT_EQ(o.code, kExitUsage);
  EXPECT_NE(o.err.find("corrupt.gguf"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("cannot load the model"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(path("r.db")));  // nothing written
}

TEST_F(PhsSearchCli, UnknownSmoothingIsAUsageError) {
  const Outcome o = ga_run({"phs-search", "--model", kAnyExistingFile, "--smoothing", "gauss"});
  EXPECT_EQ(o.code, kExitUsage);
  EXPECT_NE(o.err.find("--smoothing"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace midtune::cli
