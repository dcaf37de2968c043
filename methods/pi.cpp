#include "methods/pi.hpp"

#include "methods/registry.hpp"

namespace midtune {

RopeScale uniform_rope_scale(double scale) { return {{scale}}; }

const MethodModule& pi_method() {
  // The same field as LPES: its JSON, validation and probe are LPES's.
  static const MethodModule module = [] {
    MethodModule m = lpes_method();
    m.name = "pi";
    return m;
  }();
  return module;
}

}  // namespace midtune
