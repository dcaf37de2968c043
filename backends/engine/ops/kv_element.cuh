// Reading and writing one element of a KV cache of either form (fp32, or
// bf16 bits): the attention kernels are templated over the element type and
// compute in fp32 either way. A bf16 element is written as
// elementwise::bf16_bits rounds it and read back exactly, as the host
// reference device does (devices/reference/reference_ops.cpp).
#pragma once

#include <cstdint>

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const std::uint16_t* p) { return elementwise::bf16_value(*p); }
__device__ __forceinline__ void kv_store(float* p, float value) { *p = value; }
__device__ __forceinline__ void kv_store(std::uint16_t* p, float value) { *p = elementwise::bf16_bits(value); }

}  // namespace midtune::engine::cuda
