// The GGUF mutation check on the real SmolLM2 file, with fewer mutants (each
// load maps and packs 100 MB).
#include <iostream>
#include <fstream>
#include <iterator>

#include "tests/engine/gguf_mutation.hpp"
#include "tests/engine/model_path.hpp"

namespace midtune::testing {
namespace {

TEST(GgufMutationModel, SmolLM2MutantsAreRefusedOrRunFinite) {
  const auto path = test_model_path();
  if (path.empty()) GTEST_SKIP() << "model not found (set MIDTUNE_MODEL)";
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto mutants = GgufMutator(bytes, MutationBudget{.header_flips = 12, .tensors = 3, .keys = 10}).mutants();
  const MutationCounts counts = check_mutants(bytes, mutants);
  std::cout << "SmolLM2 GGUF mutants: " << counts.tried << " tried, " << counts.refused << " refused, "
            << counts.loaded << " loaded\n";
  EXPECT_GE(counts.tried, 60);
}

}  // namespace
}  // namespace midtune::testing
