// SyntheticTestDoubleBackend: a deterministic stand-in for a model, for tests
// and benchmarks ONLY (experiment kind `synthetic-test-double`). It never runs
// a model: it turns an Intervention's per-layer RoPE scales into a
// per-position accuracy curve — U-shaped (good at the ends, poor in the
// middle) whose middle rises as the scales approach a hidden target curve —
// and draws each sample's correctness with noise seeded by (sample id,
// intervention). A correct sample echoes the gold text, so scoring code runs
// on real strings. It is never a default: a user must name it.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.hpp"

namespace midtune {

struct SyntheticTestDoubleConfig {
  int layers = 30;
  int heads = 9;
  double noise = 0.05;      // amplitude of the per-intervention accuracy jitter
  std::uint64_t seed = 0;   // picks the noise; the target curve is fixed
  double latency_ms = 0.0;  // sleep per run() call, so tests can kill mid-evaluation
  // Sleep per prompt: a model's cost that grows with the batch and takes no
  // CPU (benchmarks of many evaluator ranks on a small machine).
  double prompt_latency_ms = 0.0;
};

class SyntheticTestDoubleBackend : public Backend {
 public:
  static constexpr const char* kKind = "synthetic-test-double";

  explicit SyntheticTestDoubleBackend(SyntheticTestDoubleConfig config);

  ModelIdentity identity() const override;
  std::vector<SampleOutput> run(const Intervention& intervention, const std::vector<BatchItem>& batch,
                                const RunOptions& options) override;
  void validate(const Intervention& intervention) const override;
  // Not a model: prompts are used as written.
  std::optional<ChatWrapper> chat_wrapper() const override { return std::nullopt; }
  nlohmann::json execution() const override { return {{"device", kKind}}; }

  // The hidden optimum: the per-layer scale the accuracy curve rewards.
  double target_scale(int layer) const;
  // Probability that a sample whose gold sits at `depth` (0..1) is answered
  // correctly under `intervention` (before per-sample noise).
  double accuracy(const Intervention& intervention, double depth) const;

 private:
  SyntheticTestDoubleConfig config_;
};

}  // namespace midtune
