// Cuts shared by the tests that run shipped experiment files shrunk to
// seconds on the test model.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>

namespace midtune::testing {

// A grid search's value lists cut to their first `keep` values each: the
// grid still crosses every gene, each value one the file itself lists.
inline void keep_first_grid_values(YAML::Node search, std::size_t keep) {
  if (!search["grid"] || !search["grid"]["values"]) return;
  for (auto axis : search["grid"]["values"]) {
    YAML::Node values = axis.second;
    while (values.size() > keep) values.remove(values.size() - 1);
  }
}

}  // namespace midtune::testing
