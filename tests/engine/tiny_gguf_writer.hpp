// A minimal GGUF v3 writer for tests: builds small, valid files (and records
// where each field sits so tests can corrupt exactly one of them).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace midtune::testing {

// Bytes in an anonymous in-memory file (memfd), opened by path
// /proc/self/fd/N: corruption tests write thousands of files without disk I/O.
class MemoryFile {
 public:
  explicit MemoryFile(const std::vector<std::uint8_t>& data) : fd_(::memfd_create("midtune-gguf-test", MFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
    std::size_t done = 0;
    while (done < data.size()) {
      const auto n = ::write(fd_, data.data() + done, data.size() - done);
      if (n <= 0) throw std::runtime_error("memfd write failed");
      done += static_cast<std::size_t>(n);
    }
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

class TinyGgufWriter {
 public:
  // Where the writer put things, as byte offsets in bytes().
  struct Layout {
    std::size_t tensor_count_at = 8;
    std::size_t kv_count_at = 16;
    std::vector<std::size_t> kv_at;           // start of each key/value pair
    std::vector<std::size_t> tensor_info_at;  // start of each tensor info
    std::size_t header_end = 0;               // end of the tensor infos
    std::size_t data_at = 0;                  // start of the data section
  };

  void add_u32(const std::string& key, std::uint32_t v) { scalar(key, 4, &v, 4); }
  void add_i32(const std::string& key, std::int32_t v) { scalar(key, 5, &v, 4); }
  void add_f32(const std::string& key, float v) { scalar(key, 6, &v, 4); }
  void add_bool(const std::string& key, bool v) {
    const std::uint8_t b = v ? 1 : 0;
    scalar(key, 7, &b, 1);
  }
  void add_u64(const std::string& key, std::uint64_t v) { scalar(key, 10, &v, 8); }
  void add_f64(const std::string& key, double v) { scalar(key, 12, &v, 8); }
  void add_string(const std::string& key, const std::string& v) {
    kvs_.push_back({});
    auto& out = kvs_.back();
    put_string(out, key);
    put_u32(out, 8);
    put_string(out, v);
  }
  void add_string_array(const std::string& key, const std::vector<std::string>& values) {
    kvs_.push_back({});
    auto& out = kvs_.back();
    put_string(out, key);
    put_u32(out, 9);
    put_u32(out, 8);
    put_u64(out, values.size());
    for (const auto& v : values) put_string(out, v);
  }
  void add_i32_array(const std::string& key, const std::vector<std::int32_t>& values) {
    array(key, 5, values.data(), values.size(), 4);
  }
  void add_f32_array(const std::string& key, const std::vector<float>& values) {
    array(key, 6, values.data(), values.size(), 4);
  }
  void add_tensor(const std::string& name, const std::vector<std::uint64_t>& dims, std::uint32_t type,
                  std::vector<std::uint8_t> data) {
    const std::uint64_t size = data.size();
    tensors_.push_back({name, dims, type, std::move(data), size, {}});
  }
  // A tensor of `size` bytes made only when written (write_streamed: one
  // tensor in memory at a time, for files larger than memory).
  void add_tensor_made_later(const std::string& name, const std::vector<std::uint64_t>& dims, std::uint32_t type,
                             std::uint64_t size, std::function<std::vector<std::uint8_t>()> make) {
    tensors_.push_back({name, dims, type, {}, size, std::move(make)});
  }

  std::vector<std::uint8_t> bytes(Layout* layout = nullptr, std::uint32_t alignment = 32) const {
    Layout l;
    std::vector<std::uint64_t> offsets;
    std::vector<std::uint8_t> out = header(l, offsets, alignment);
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(l.data_at + offsets[i], 0);
      with_data(tensors_[i],
                [&](const std::vector<std::uint8_t>& data) { out.insert(out.end(), data.begin(), data.end()); });
    }
    if (layout) *layout = l;
    return out;
  }

  // The same file as bytes() written to `path` tensor by tensor.
  void write_streamed(const std::filesystem::path& path, std::uint32_t alignment = 32) const {
    Layout l;
    std::vector<std::uint64_t> offsets;
    const std::vector<std::uint8_t> head = header(l, offsets, alignment);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
    std::uint64_t at = head.size();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const std::vector<char> padding(l.data_at + offsets[i] - at, 0);
      f.write(padding.data(), static_cast<std::streamsize>(padding.size()));
      with_data(tensors_[i], [&](const std::vector<std::uint8_t>& data) {
        if (data.size() != tensors_[i].size) throw std::logic_error("tensor " + tensors_[i].name + ": size changed");
        f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
      });
      at = l.data_at + offsets[i] + tensors_[i].size;
    }
    if (!f) throw std::runtime_error("cannot write " + path.string());
  }

 private:
  struct Tensor;
  // Calls `use` with a tensor's bytes: its own, or made now (without copying
  // the former).
  template <class F>
  static void with_data(const Tensor& t, F&& use) {
    if (t.make) {
      use(t.make());
    } else {
      use(t.data);
    }
  }
  // Magic, counts, key/values, tensor infos and the padding up to the data;
  // each tensor's data offset (from the data's start) into `offsets`.
  std::vector<std::uint8_t> header(Layout& l, std::vector<std::uint64_t>& offsets, std::uint32_t alignment) const {
    std::vector<std::uint8_t> out = {'G', 'G', 'U', 'F'};
    put_u32(out, 3);
    put_u64(out, tensors_.size());
    put_u64(out, kvs_.size());
    for (const auto& kv : kvs_) {
      l.kv_at.push_back(out.size());
      out.insert(out.end(), kv.begin(), kv.end());
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      l.tensor_info_at.push_back(out.size());
      put_string(out, t.name);
      put_u32(out, static_cast<std::uint32_t>(t.dims.size()));
      for (auto d : t.dims) put_u64(out, d);
      put_u32(out, t.type);
      put_u64(out, offset);
      offsets.push_back(offset);
      offset = align(offset + t.size, alignment);
    }
    l.header_end = out.size();
    out.resize(align(out.size(), alignment), 0);
    l.data_at = out.size();
    return out;
  }

 public:
  static void write(const std::filesystem::path& path, const std::vector<std::uint8_t>& data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!f) throw std::runtime_error("cannot write " + path.string());
  }

  static void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) { put_raw(out, &v, 4); }
  static void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) { put_raw(out, &v, 8); }
  static void patch_u32(std::vector<std::uint8_t>& out, std::size_t at, std::uint32_t v) { std::memcpy(&out.at(at + 3) - 3, &v, 4); }
  static void patch_u64(std::vector<std::uint8_t>& out, std::size_t at, std::uint64_t v) { std::memcpy(&out.at(at + 7) - 7, &v, 8); }

 private:
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::vector<std::uint8_t> data;
    std::uint64_t size;                               // data's bytes (or make()'s)
    std::function<std::vector<std::uint8_t>()> make;  // empty: data holds it
  };
  static std::uint64_t align(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }
  static void put_raw(std::vector<std::uint8_t>& out, const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  static void put_string(std::vector<std::uint8_t>& out, const std::string& s) {
    put_u64(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void scalar(const std::string& key, std::uint32_t type, const void* v, std::size_t n) {
    kvs_.push_back({});
    put_string(kvs_.back(), key);
    put_u32(kvs_.back(), type);
    put_raw(kvs_.back(), v, n);
  }
  void array(const std::string& key, std::uint32_t type, const void* v, std::size_t count, std::size_t elem) {
    kvs_.push_back({});
    auto& out = kvs_.back();
    put_string(out, key);
    put_u32(out, 9);
    put_u32(out, type);
    put_u64(out, count);
    put_raw(out, v, count * elem);
  }

  std::vector<std::vector<std::uint8_t>> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace midtune::testing
