#include "tests/test_paths.hpp"

namespace midtune::testing {

// Set by tests/CMakeLists.txt for this file alone (target midtune_test_paths).
const std::string& source_dir() {
  static const std::string dir = MIDTUNE_SOURCE_DIR;
  return dir;
}

const std::string& binary_dir() {
  static const std::string dir = MIDTUNE_BINARY_DIR;
  return dir;
}

}  // namespace midtune::testing
