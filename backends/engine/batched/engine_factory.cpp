#include "backends/engine/batched/engine_factory.hpp"

#include <optional>

#include "backends/engine/batched/batched_backend.hpp"
#include "backends/engine/batched/cuda_ops_device.hpp"
#include "backends/engine/cuda/devices.hpp"
#include "backends/engine/engine_backend.hpp"

namespace midtune::engine {

std::unique_ptr<Backend> make_engine_backend(const std::filesystem::path& model, const EngineDeviceOptions& options) {
  if (options.precision != "native" && options.precision != "fp32" && options.precision != "file") {
    throw std::invalid_argument("backend.precision: '" + options.precision + "' is not one of native, fp32, file");
  }
  const KvForm kv_form = parse_kv_form(options.kv_cache, "backend.kv_cache");
  std::optional<batched::PrefillAttention> attention;
  if (!options.attention.empty()) {
    attention = batched::parse_prefill_attention(options.attention, "backend.attention");
    if (options.device != "cuda") {
      throw std::invalid_argument("backend.attention: '" + options.attention +
                                  "' is a device: cuda setting (the GPU's prefill attention body)");
    }
  }
  require_device(options.device);
  if (options.device == "cuda") {
    if (options.precision == "fp32") {
      throw std::invalid_argument("backend.precision: 'fp32' is a device: cpu setting; the GPU engine runs bf16");
    }
    batched::BatchedOptions batched_options;
    batched_options.batch_tokens = options.batch_tokens;
    auto device = batched::make_cuda_ops(options.gpu);
    device->set_weight_form(options.precision == "file" ? batched::WeightForm::file : batched::WeightForm::bf16);
    device->set_kv_form(kv_form);
    if (attention) device->set_prefill_attention(*attention);
    return std::make_unique<batched::BatchedBackend>(model, std::move(device), batched_options);
  }
  if (options.precision == "file") {
    throw std::invalid_argument(
        "backend.precision: 'file' is a device: cuda setting; the CPU engine always multiplies the file's own "
        "blocks (precision: native)");
  }
  EngineOptions cpu_options;
  cpu_options.threads = options.threads;
  cpu_options.fp32 = options.precision == "fp32";
  cpu_options.kv_cache = kv_form;
  return std::make_unique<EngineBackend>(model, cpu_options);
}

const GgufFile* engine_model_file(const Backend& backend) {
  if (const auto* cpu = dynamic_cast<const EngineBackend*>(&backend)) return &cpu->model().file();
  if (const auto* gpu = dynamic_cast<const batched::BatchedBackend*>(&backend)) return &gpu->model().file();
  return nullptr;
}

}  // namespace midtune::engine
