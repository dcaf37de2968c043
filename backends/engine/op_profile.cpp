#include "backends/engine/op_profile.hpp"

#include <algorithm>

namespace midtune::engine {

std::vector<OpProfile::Row> OpProfile::rows() const {
  std::vector<Row> out;
  for (const auto& [op, row] : totals_) out.push_back(row);
  std::sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return out;
}

void OpProfile::add(const std::string& op, double seconds) {
  Row& row = totals_[op];
  row.op = op;
  row.calls += 1;
  row.seconds += seconds;
}

}  // namespace midtune::engine
