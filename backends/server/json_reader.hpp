// Strict reading of one JSON object of the evaluation protocol: every field
// required unless asked for optionally, types and ranges checked, unknown
// fields rejected. Errors name the full path ("items[3].chunks[0]") and the
// reason, so a 400 reply or a client error says exactly what is wrong.
#pragma once

#include <set>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace midtune::server {

// A protocol message (request or reply) that breaks PROTOCOL.md.
struct ProtocolError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// A well-formed message carrying a number no model can compute with (a RoPE
// scale of 1e300): PROTOCOL.md's 422 invalid_input, not 400.
struct InvalidValueError : ProtocolError {
  using ProtocolError::ProtocolError;
};

[[noreturn]] void protocol_error(const std::string& path, const std::string& reason);

class ObjectReader {
 public:
  // Throws ProtocolError unless j is an object.
  ObjectReader(const nlohmann::json& j, std::string path);

  const nlohmann::json& required(const std::string& key);
  std::string string(const std::string& key, std::size_t min_bytes, std::size_t max_bytes);
  long long integer(const std::string& key, long long lo, long long hi);
  double number(const std::string& key, double lo, double hi);
  bool boolean(const std::string& key);
  // Throws ProtocolError naming the first field that no accessor asked for.
  void reject_unknown() const;

  std::string path_of(const std::string& key) const;

 private:
  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string> seen_;
};

}  // namespace midtune::server
