#include "backends/engine/devices/cuda/devices.hpp"

#include <sstream>
#include <stdexcept>

#ifdef MIDTUNE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace midtune::engine {

CudaDeviceReport cuda_devices() {
  CudaDeviceReport report;
#ifdef MIDTUNE_WITH_CUDA
  report.built_with_cuda = true;
  int count = 0;
  // No driver or no GPU is an error code here (cudaErrorNoDevice,
  // cudaErrorInsufficientDriver), not a crash: report it.
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    report.why_none = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    return report;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, i) != cudaSuccess) continue;
    report.devices.push_back({i, properties.name, properties.totalGlobalMem, properties.major, properties.minor});
  }
  if (report.devices.empty()) report.why_none = "the CUDA runtime reports no device";
#else
  report.why_none = "this build has no CUDA support (configured with -DMIDTUNE_CUDA=OFF or without a CUDA toolkit)";
#endif
  return report;
}

std::string describe(const CudaDeviceReport& report) {
  std::ostringstream out;
  if (report.devices.empty()) {
    out << "no CUDA devices: " << report.why_none << '\n';
    return out.str();
  }
  for (const CudaDevice& d : report.devices) {
    out << "cuda:" << d.index << "  " << d.name << "  " << d.memory_bytes / (1024 * 1024) << " MiB  compute capability "
        << d.compute_major << '.' << d.compute_minor << '\n';
  }
  return out.str();
}

void require_device(const std::string& device) {
  if (device == "cpu") return;
  if (device != "cuda") throw std::invalid_argument("backend.device: '" + device + "' is not one of cpu, cuda");
  const CudaDeviceReport report = cuda_devices();
  if (!report.built_with_cuda) throw std::invalid_argument("backend.device: 'cuda': " + report.why_none);
  if (report.devices.empty())
    throw std::invalid_argument("backend.device: 'cuda': no CUDA device on this machine (" + report.why_none +
                                "); `ga-run devices` lists what there is");

}

}  // namespace midtune::engine
