#include "backends/engine/engine_factory.hpp"

#include <optional>

#include "backends/engine/devices/cuda/cuda_ops_device.hpp"
#include "backends/engine/devices/cuda/devices.hpp"
#include "backends/engine/engine_backend.hpp"

namespace midtune::engine {

std::unique_ptr<Backend> make_engine_backend(const std::filesystem::path& model, const EngineDeviceOptions& options) {
  if (options.precision != "native" && options.precision != "fp32" && options.precision != "file") {
    throw std::invalid_argument("backend.precision: '" + options.precision + "' is not one of native, fp32, file");
  }
  const KvForm kv_form = parse_kv_form(options.kv_cache, "backend.kv_cache");
  std::optional<devices::PrefillAttention> attention;
  if (!options.attention.empty()) {
    attention = devices::parse_prefill_attention(options.attention, "backend.attention");
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
    EngineOptions gpu_options;
    gpu_options.schedule = Schedule::packed;
    gpu_options.batch_tokens = options.batch_tokens;
    auto device = devices::make_cuda_ops(options.gpu);
    device->set_weight_form(options.precision == "file" ? devices::WeightForm::file : devices::WeightForm::bf16);
    device->set_kv_form(kv_form);
    if (attention) device->set_prefill_attention(*attention);
    return make_device_ops_backend(model, std::move(device), gpu_options);
  }
  if (options.precision == "file") {
    throw std::invalid_argument(
        "backend.precision: 'file' is a device: cuda setting; the CPU engine always multiplies the file's own "
        "blocks (precision: native)");
  }
  EngineOptions cpu_options;
  cpu_options.schedule = Schedule::per_sequence;
  cpu_options.threads = options.threads;
  cpu_options.fp32 = options.precision == "fp32";
  cpu_options.kv_cache = kv_form;
  return std::make_unique<EngineBackend>(model, cpu_options);
}

std::unique_ptr<EngineBackend> make_device_ops_backend(const std::filesystem::path& model,
                                                       std::unique_ptr<devices::DeviceOps> device) {
  return make_device_ops_backend(model, std::move(device), EngineOptions{.schedule = Schedule::packed});
}

std::unique_ptr<EngineBackend> make_device_ops_backend(const std::filesystem::path& model,
                                                       std::unique_ptr<devices::DeviceOps> device,
                                                       const EngineOptions& options) {
  const std::string precision = device->precision();
  return std::make_unique<EngineBackend>(model, std::move(device), precision, options);
}

const GgufFile* engine_model_file(const Backend& backend) {
  if (const auto* engine = dynamic_cast<const EngineBackend*>(&backend)) return &engine->model().file();
  return nullptr;
}

}  // namespace midtune::engine
