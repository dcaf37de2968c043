#include "core/experiment/experiment_name.hpp"

namespace midtune {
namespace {

bool unsafe_byte(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return c == '/' || c == '\\' || byte < 0x20 || byte == 0x7f;
}

}  // namespace

std::string experiment_name_problem(const std::string& name) {
  if (name.empty()) return "must not be empty";
  if (name.size() > kMaxExperimentNameBytes)
    return "is " + std::to_string(name.size()) + " bytes long; at most " + std::to_string(kMaxExperimentNameBytes) +
           " are allowed (it names the report's plot files)";
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!unsafe_byte(name[i])) continue;
    const char c = name[i];
    const std::string what = c == '/' || c == '\\' ? std::string("a path separator '") + c + "'"
                             : c == '\0'          ? std::string("a NUL byte")
                             : c == '\n'          ? std::string("a line break (a quote left open?)")
                                                  : "the control byte " + std::to_string(static_cast<unsigned char>(c));
    return "holds " + what + " at byte " + std::to_string(i) +
           "; a name is one file name (the report's plots are named after it)";
  }
  return "";
}

std::string experiment_file_stem(const std::string& name) {
  std::string stem = name.substr(0, kMaxExperimentNameBytes);
  for (char& c : stem)
    if (unsafe_byte(c)) c = '_';
  return stem.empty() ? "_" : stem;
}

}  // namespace midtune
