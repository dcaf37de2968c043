#include "methods/intervention.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "methods/registry.hpp"

namespace midtune {
namespace {

using nlohmann::json;

// Round to 9 significant digits so that two interventions that act the same
// (up to float noise from decoding) print the same canonical text.
double canonical_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return std::strtod(buf, nullptr);
}

json canonicalise(const json& j) {
  if (j.is_number_float()) return canonical_number(j.get<double>());
  if (j.is_array() || j.is_object()) {
    json out = j;
    for (auto& v : out) v = canonicalise(v);
    return out;
  }
  return j;
}

}  // namespace

json Intervention::to_json() const {
  json j = json::object();
  for (const MethodModule* m : field_owners()) {
    if (m->is_set(*this)) m->write_json(*this, j);
  }
  return j;
}

Intervention Intervention::from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("intervention: must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& fields = intervention_fields();
    if (std::find(fields.begin(), fields.end(), it.key()) == fields.end())
      throw std::invalid_argument("intervention." + it.key() + ": unknown field");
  }
  Intervention iv;
  for (const MethodModule* m : field_owners()) {
    if (j.contains(m->field)) m->read_json(j.at(m->field), iv);
  }
  return iv;
}

std::string Intervention::canonical() const { return canonicalise(to_json()).dump(); }

std::string fnv1a_hex(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace midtune
