// The CUDA body of DeviceOps: device memory from cudaMalloc, every op one of
// the kernels in backends/engine/ops/*_cuda.cu (or cuBLAS for the products),
// all on one stream of the chosen GPU. Built only with CUDA
// (MIDTUNE_WITH_CUDA); make_cuda_ops() says why not otherwise.
#pragma once

#include <memory>
#include <string>

#include "backends/engine/devices/device_ops.hpp"

namespace midtune::engine::devices {

// The ops on GPU `index`; throws std::invalid_argument when this build has no
// CUDA or the machine has no such device (naming what there is).
std::unique_ptr<DeviceOps> make_cuda_ops(int index);

}  // namespace midtune::engine::devices
