// The in-tree engine (EngineBackend) on the device a user names, with the
// schedule that device needs: `cpu` the CPU device per sequence, `cuda` GPU
// `gpu` in packed passes (engine_backend.hpp "Schedule"). Checks the device
// first (std::invalid_argument saying why a GPU cannot be used), then loads
// the model. One place for ga-run's experiments, `ga-run generate` and
// ga-serve.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "backends/engine/gguf/gguf.hpp"

namespace midtune::engine {

class EngineBackend;  // engine_backend.hpp
struct EngineOptions;
namespace devices {
class DeviceOps;  // device_ops.hpp
}

struct EngineDeviceOptions {
  std::string device = "cpu";    // cpu | cuda
  int threads = 0;               // cpu: 0 = all cores
  int gpu = 0;                   // cuda: device index
  std::size_t batch_tokens = 0;  // cuda: tokens per pass, 0 = from the free memory
  // backend.precision: native (the device's own: int8 activations on the
  // CPU, bf16 on the GPU), fp32 (cpu: every matrix in fp32,
  // EngineOptions::fp32) or file (cuda: weights kept in their GGUF blocks,
  // devices::WeightForm::file).
  std::string precision = "native";
  // backend.kv_cache: fp32, or bf16 (cuda: keys and values stored in bf16,
  // half the memory, devices::KvForm::bf16; another model identity).
  std::string kv_cache = "fp32";
  // backend.attention (cuda): the prefill attention body, flash or gemm
  // (devices::PrefillAttention; another model identity); empty: the
  // device's default (flash, or MIDTUNE_CUDA_ATTENTION).
  std::string attention;
};

std::unique_ptr<Backend> make_engine_backend(const std::filesystem::path& model, const EngineDeviceOptions& options);

// The engine on a device of the GPU family (a GPU, the host reference), set
// up before (weight and KV forms); its precision() names the identity. In
// packed passes (batch_tokens from the device's free memory), or as
// `options` say.
std::unique_ptr<EngineBackend> make_device_ops_backend(const std::filesystem::path& model,
                                                       std::unique_ptr<devices::DeviceOps> device);
std::unique_ptr<EngineBackend> make_device_ops_backend(const std::filesystem::path& model,
                                                       std::unique_ptr<devices::DeviceOps> device,
                                                       const EngineOptions& options);

// The GGUF an engine backend runs (either device); nullptr for other backends.
const GgufFile* engine_model_file(const Backend& backend);

}  // namespace midtune::engine
