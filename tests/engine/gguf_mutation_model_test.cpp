// The GGUF mutation check on the real SmolLM2 file, with fewer mutants (each
// load copies, maps and packs 100 MB): one of each kind the generator makes
// within its budget (gguf_mutation_test runs hundreds on a tiny model).
#include <algorithm>
#include <iostream>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>

#include "tests/engine/gguf_mutation.hpp"
#include "tests/engine/model_path.hpp"

namespace midtune::testing {
namespace {

// A mutant's kind: its description without the key's name, where a flipped
// byte was, or the type a retyped tensor had; a tensor's name gives way to
// its storage (F32 norms and quantised matrices are read and checked apart).
// Truncations keep their size: each cuts another part of the file, cheaply.
std::string kind(const std::string& what, const GgufFile& base) {
  static const std::regex tensor("^tensor '([^']*)' "), key("^key '[^']*' "), old_type("type [0-9]+ -> "),
      flipped("^byte [0-9]+ ");
  std::smatch named;
  if (std::regex_search(what, named, tensor)) {
    const std::string storage = base.tensor(named[1].str()).type_id == 0 ? "F32" : "quantised";
    return storage + " tensor " + std::regex_replace(named.suffix().str(), old_type, "type -> ");
  }
  if (std::regex_search(what, key)) return "key " + std::regex_replace(what, key, "");
  return std::regex_replace(what, flipped, "byte ");
}

// The first mutant of each kind that changes the file (setting a field to
// the value it has is no mutant).
std::vector<Mutant> one_of_each_kind(const std::vector<std::uint8_t>& bytes, const GgufFile& base,
                                     const std::vector<Mutant>& mutants) {
  std::set<std::string> seen;
  std::vector<Mutant> out;
  for (const Mutant& m : mutants) {
    const bool unchanged = m.size >= bytes.size() && m.at + m.patch.size() <= bytes.size() &&
                           std::equal(m.patch.begin(), m.patch.end(), bytes.begin() + static_cast<std::ptrdiff_t>(m.at));
    if (!unchanged && seen.insert(kind(m.what, base)).second) out.push_back(m);
  }
  return out;
}

TEST(GgufMutationModel, SmolLM2MutantsAreRefusedOrRunFinite) {
  const auto path = test_model_path();
  if (path.empty()) GTEST_SKIP() << "model not found (set MIDTUNE_MODEL)";
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto mutants = GgufMutator(bytes, MutationBudget{.header_flips = 12, .tensors = 3, .keys = 10}).mutants();
  const auto kinds = one_of_each_kind(bytes, GgufFile(path), mutants);
  const MutationCounts counts = check_mutants(bytes, kinds);
  std::cout << "SmolLM2 GGUF mutants: " << counts.tried << " tried (one of each kind among " << mutants.size()
            << "), " << counts.refused << " refused, " << counts.loaded << " loaded\n";
  EXPECT_GE(counts.tried, 60);
}

}  // namespace
}  // namespace midtune::testing
