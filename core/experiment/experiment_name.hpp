// An experiment's name is also a file name: the report writes its plots as
// <name>-heldout.svg beside the results file. So a name read from a file or
// given with --new-experiment must be one file name, and a name already
// stored (from a results file written before names were checked, or by
// another tool) is made into one before it is used as a path.
#pragma once

#include <string>

namespace midtune {

// The longest name accepted: a file stem with room for "-heldout.svg" under
// the common 255-byte limit on one file name.
inline constexpr std::size_t kMaxExperimentNameBytes = 200;

// Why `name` cannot be an experiment's name ("" when it can): empty, longer
// than kMaxExperimentNameBytes, or holding a path separator ('/' or '\'), a
// NUL or another control byte. ("." and ".." are fine: the plot's file name
// always has a suffix after the name.)
std::string experiment_name_problem(const std::string& name);

// `name` as one safe file stem: every separator, control or NUL byte becomes
// '_' and the result is cut to kMaxExperimentNameBytes ("_" for an empty
// name). A name that passes experiment_name_problem comes back unchanged.
std::string experiment_file_stem(const std::string& name);

}  // namespace midtune
