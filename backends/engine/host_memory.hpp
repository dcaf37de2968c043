// Memory of the devices whose "device memory" is host memory (the CPU
// engine, the host reference): 64-byte aligned blocks, copies, and what the
// machine has free.
#pragma once

#include <cstddef>
#include <string>

namespace midtune::engine::host_memory {

// Throws std::runtime_error ("<who>: out of memory allocating N bytes").
void* allocate(std::size_t bytes, const std::string& who);
void release(void* pointer) noexcept;
void copy(void* dst, const void* src, std::size_t bytes);
void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t row_bytes,
               int rows);
std::size_t free_bytes();

}  // namespace midtune::engine::host_memory
