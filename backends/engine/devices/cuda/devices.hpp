// Which CUDA devices this machine has, for `ga-run devices` and for
// `backend.device: cuda`. Built against the CUDA runtime when CMake found the
// toolkit (MIDTUNE_CUDA, the default); without it, or on a machine without a
// GPU or driver, the report says so instead of failing.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace midtune::engine {

struct CudaDevice {
  int index = 0;
  std::string name;
  std::size_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

struct CudaDeviceReport {
  bool built_with_cuda = false;
  std::vector<CudaDevice> devices;
  std::string why_none;  // when devices is empty: what the runtime said
};

CudaDeviceReport cuda_devices();

// Human-readable lines, one per device, or one line saying why there is none.
std::string describe(const CudaDeviceReport& report);

// Checks `backend.device` before a model is loaded: "cpu" passes; "cuda"
// passes where this build has CUDA and the machine a device, else throws
// std::invalid_argument saying which of the two is missing.
void require_device(const std::string& device);

}  // namespace midtune::engine
