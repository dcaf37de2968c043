// Where a forward pass spends its time, op by op, on any device: the model
// times each of its Device calls into an OpProfile when one is set
// (Model::set_op_profile; bench/cuda_bench_cli --profile). Each timed call
// waits for the work before it and for itself, so a row is that op's own
// time plus one synchronisation (a few microseconds on a GPU: small decode
// ops read high), and the waits serialise the device: for finding where the
// time goes, not for running searches.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace midtune::engine {

class OpProfile {
 public:
  struct Row {
    std::string op;  // the Device op; a product also names its matrix (rows x cols)
    std::size_t calls = 0;
    double seconds = 0.0;
  };
  // Ops by time spent since the last reset, largest first.
  std::vector<Row> rows() const;
  void reset() { totals_.clear(); }
  void add(const std::string& op, double seconds);

 private:
  std::map<std::string, Row> totals_;
};

}  // namespace midtune::engine
