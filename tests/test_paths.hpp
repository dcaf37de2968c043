// Where a test finds the source tree (fixtures, experiment files, scripts)
// and the build tree (ga-run and the other tools). Functions defined in one
// small file, tests/test_paths.cpp, the only one compiled with the two paths:
// every other test file then compiles to the same thing wherever the
// checkout lies, so a clone in another folder (CI's) takes its objects from
// the compiler cache instead of compiling them again.
#pragma once

#include <string>

namespace midtune::testing {

const std::string& source_dir();  // the checkout's root, no trailing slash
const std::string& binary_dir();  // the build tree holding ga-run

}  // namespace midtune::testing
