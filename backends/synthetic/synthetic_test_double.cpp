#include "backends/synthetic/synthetic_test_double.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

#include "methods/registry.hpp"

namespace midtune {
namespace {

// A uniform number in [0, 1) from text, stable across platforms and runs.
double unit_hash(const std::string& text) {
  const std::uint64_t h = std::stoull(fnv1a_hex(text), nullptr, 16);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

}  // namespace

SyntheticTestDoubleBackend::SyntheticTestDoubleBackend(SyntheticTestDoubleConfig config) : config_(config) {
  if (config_.layers < 1) throw std::invalid_argument("synthetic-test-double: layers must be >= 1");
  if (config_.heads < 1) throw std::invalid_argument("synthetic-test-double: heads must be >= 1");
  if (!(config_.noise >= 0.0 && config_.noise <= 1.0))
    throw std::invalid_argument("synthetic-test-double: noise must be in [0, 1]");
}

ModelIdentity SyntheticTestDoubleBackend::identity() const {
  ModelIdentity id;
  id.name = kKind;
  id.architecture = "synthetic";
  id.layers = config_.layers;
  id.heads = config_.heads;
  id.kv_heads = config_.heads;
  id.hidden = 64 * config_.heads;
  // Results depend on the noise seed and amplitude, so they are part of the identity.
  id.tokenizer_hash = "seed=" + std::to_string(config_.seed) + ",noise=" + std::to_string(config_.noise);
  return id;
}

double SyntheticTestDoubleBackend::target_scale(int layer) const {
  // Rises from 1.2 at the first layer to 1.8 at the last, reachable by a
  // cubic Bézier in the LPES space [1, 2].
  const double u = config_.layers == 1 ? 0.0 : static_cast<double>(layer) / (config_.layers - 1);
  return 1.2 + 0.6 * u * u;
}

double SyntheticTestDoubleBackend::accuracy(const Intervention& intervention, double depth) const {
  double squared = 0.0;
  for (int layer = 0; layer < config_.layers; ++layer) {
    const double d = intervention.scale_for(layer, 0) - target_scale(layer);
    squared += d * d;
  }
  const double distance = std::sqrt(squared / config_.layers);
  const double closeness = std::exp(-(distance / 0.25) * (distance / 0.25));
  const double middleness = 1.0 - (2.0 * depth - 1.0) * (2.0 * depth - 1.0);  // 0 at ends, 1 in the middle
  const double jitter = config_.noise * (2.0 * unit_hash("jitter|" + std::to_string(config_.seed) + "|" +
                                                         intervention.canonical()) - 1.0);
  const double p = 0.9 - 0.5 * middleness + 0.45 * closeness * middleness + jitter;
  return std::clamp(p, 0.0, 1.0);
}

void SyntheticTestDoubleBackend::validate(const Intervention& intervention) const {
  // The double models RoPE scales only; the rest is the registry's check.
  for (const std::string& field : intervention_fields_set(intervention)) {
    if (field != "rope_scale")
      throw std::invalid_argument("synthetic-test-double: only rope_scale interventions are modelled, not " + field);
  }
  validate_intervention(intervention, identity().shape());
}

std::vector<SampleOutput> SyntheticTestDoubleBackend::run(const Intervention& intervention,
                                                          const std::vector<BatchItem>& batch,
                                                          const RunOptions& /*options*/) {
  validate(intervention);
  const double sleep_ms = config_.latency_ms + config_.prompt_latency_ms * static_cast<double>(batch.size());
  if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms));
  const std::string canonical = intervention.canonical();
  std::vector<SampleOutput> out;
  out.reserve(batch.size());
  for (const BatchItem& item : batch) {
    const double p = accuracy(intervention, item.gold_depth);
    const bool correct = unit_hash("sample|" + item.id + "|" + canonical) < p;
    SampleOutput o;
    o.id = item.id;
    o.output_text = correct ? "The value is " + item.gold + "." : "I cannot find that key.";
    o.gold_emitted_first = correct;
    o.gold_logprob = std::log(std::max(correct ? p : 1.0 - p, 1e-9)) * (correct ? 1.0 : 4.0);
    o.prompt_tokens = static_cast<int>(item.prompt_text.size() / 4);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace midtune
