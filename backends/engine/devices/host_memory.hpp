// Memory of the devices whose "device memory" is host memory (the CPU
// engine, the host reference): 64-byte aligned blocks, copies, and what the
// machine has free; HostMemoryDevice gives a Device body all of it.
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

namespace midtune::engine {

// The memory part of a Device (device.hpp) whose device memory is host
// memory, on top of `Base` (Device, or a family of it such as DeviceOps).
template <typename Base>
class HostMemoryDevice : public Base {
 public:
  void* allocate(std::size_t bytes) override { return host_memory::allocate(bytes, this->name()); }
  void release(void* pointer) noexcept override { host_memory::release(pointer); }
  void upload(void* device, const void* host, std::size_t bytes) override { host_memory::copy(device, host, bytes); }
  void download(void* host, const void* device, std::size_t bytes) override { host_memory::copy(host, device, bytes); }
  void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t row_bytes,
                 int rows) override {
    host_memory::copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
  }
  void synchronize() override {}
  std::size_t free_bytes() const override { return host_memory::free_bytes(); }
};

}  // namespace midtune::engine
