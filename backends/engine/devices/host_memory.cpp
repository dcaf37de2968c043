#include "backends/engine/devices/host_memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace midtune::engine::host_memory {

void* allocate(std::size_t bytes, const std::string& who) {
  // aligned_alloc wants a multiple of the alignment.
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::runtime_error(who + ": out of memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

void release(void* pointer) noexcept { std::free(pointer); }

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t row_bytes,
               int rows) {
  for (int r = 0; r < rows; ++r) {
    std::memmove(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
  }
}

std::size_t free_bytes() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

}  // namespace midtune::engine::host_memory
