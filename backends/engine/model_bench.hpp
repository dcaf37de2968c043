// Prefill and decode throughput of the engine on synthetic token ids (the
// measurement behind `ga-run bench-model` and bench/engine_bench).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/engine/devices/device.hpp"
#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

class OpProfile;

struct ModelBenchOptions {
  int prompt_tokens = 512;
  int decode_tokens = 64;
  int threads = 2;
  int repeats = 1;  // best of this many prefills
  Isa isa = best_isa();
  KvForm kv_cache = KvForm::fp32;
  // Where set, the decode steps' time op by op (op_profile.hpp).
  OpProfile* decode_profile = nullptr;
};

struct ModelBenchResult {
  double load_seconds = 0.0;
  double prefill_tokens_per_second = 0.0;
  double decode_tokens_per_second = 0.0;
  // The same rates per second of process CPU time (all threads): a
  // load-independent figure when other jobs share the cores.
  double prefill_tokens_per_cpu_second = 0.0;
  double decode_tokens_per_cpu_second = 0.0;
  nlohmann::json to_json(const ModelBenchOptions& options) const;
};

// A fixed pseudo-random sequence of `count` ids inside the vocabulary (past
// the first 100, usually special tokens), the same for every run.
std::vector<std::int32_t> bench_tokens(int count, int vocab);

// Token ids are bench_tokens(), the same for every run (bench/engine_bench.py
// feeds llama.cpp the same ids).
ModelBenchResult bench_model(const std::filesystem::path& model_path, const ModelBenchOptions& options);

}  // namespace midtune::engine
