#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/gguf/gguf_internal.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

namespace midtune {
using gguf_detail::is_float;
using gguf_detail::is_signed;
using gguf_detail::is_unsigned;
using gguf_detail::kInt64Max;

namespace {

// Block layouts as in ggml-common.h.
constexpr std::array<GgmlTypeInfo, 15> kTypes = {{
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},       // f16 scale + 16 bytes of nibbles
    {GgmlType::Q4_1, "Q4_1", 32, 20},       // f16 scale, f16 min + 16 bytes
    {GgmlType::Q5_0, "Q5_0", 32, 22},       // f16 scale + 4 bytes of 5th bits + 16 bytes
    {GgmlType::Q5_1, "Q5_1", 32, 24},       // f16 scale, f16 min + 4 + 16 bytes
    {GgmlType::Q8_0, "Q8_0", 32, 34},       // f16 scale + 32 int8
    {GgmlType::Q2_K, "Q2_K", 256, 84},      // 16 scale bytes + 64 crumb bytes + 2 f16
    {GgmlType::Q3_K, "Q3_K", 256, 110},     // 32 high-bit bytes + 64 crumb bytes + 12 scales + f16
    {GgmlType::Q4_K, "Q4_K", 256, 144},     // 2 f16 + 12 scale bytes + 128 nibble bytes
    {GgmlType::Q5_K, "Q5_K", 256, 176},     // 2 f16 + 12 scales + 32 high-bit bytes + 128 nibble bytes
    {GgmlType::Q6_K, "Q6_K", 256, 210},     // 128 ql + 64 qh + 16 scales + f16
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},   // f16 scale + 16 bytes of codebook nibbles
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136}, // f16 scale + 2 + 4 scale bytes + 128 nibble bytes
    {GgmlType::BF16, "BF16", 1, 2},
}};

constexpr std::uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr std::uint64_t kMaxReserve = 1u << 16;

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return __builtin_mul_overflow(a, b, &out);
}
bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return __builtin_add_overflow(a, b, &out);
}

std::size_t scalar_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;  // at least the length prefix
    case GgufValueType::ARRAY: return 12;  // at least type + count
  }
  return 0;
}

bool is_known_value_type(std::uint32_t raw) { return raw <= 12; }


// Bounds-checked little-endian reads over the mapping. Every read first
// checks that the bytes exist, so no read ever leaves [0, size).
class Cursor {
 public:
  Cursor(const std::byte* base, std::uint64_t size, const GgufFile& file,
         void (*fail)(const GgufFile&, std::uint64_t, const std::string&))
      : base_(base), size_(size), file_(file), fail_(fail) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return size_ - pos_; }
  [[noreturn]] void fail(std::uint64_t at, const std::string& what) const {
    fail_(file_, at, what);
    __builtin_unreachable();
  }

  void need(std::uint64_t n, const char* what) const {
    if (n > remaining())
      fail(pos_, std::string("file truncated: ") + what + " needs " + std::to_string(n) +
                     " bytes, only " + std::to_string(remaining()) + " remain");
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(const char* what) {
    const std::uint64_t at = pos_;
    const auto length = read<std::uint64_t>(what);
    if (length > remaining())
      fail(at, std::string(what) + " length " + std::to_string(length) + " exceeds the " +
                   std::to_string(remaining()) + " bytes left in the file");
    std::string out(reinterpret_cast<const char*>(base_ + pos_), static_cast<std::size_t>(length));
    pos_ += length;
    return out;
  }

 private:
  const std::byte* base_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  const GgufFile& file_;
  void (*fail_)(const GgufFile&, std::uint64_t, const std::string&);
};

void append_element(Cursor& in, GgufValueType type, GgufValue& value) {
  switch (type) {
    case GgufValueType::UINT8: value.unsigned_ints.push_back(in.read<std::uint8_t>("UINT8 value")); break;
    case GgufValueType::UINT16: value.unsigned_ints.push_back(in.read<std::uint16_t>("UINT16 value")); break;
    case GgufValueType::UINT32: value.unsigned_ints.push_back(in.read<std::uint32_t>("UINT32 value")); break;
    case GgufValueType::UINT64: value.unsigned_ints.push_back(in.read<std::uint64_t>("UINT64 value")); break;
    case GgufValueType::INT8: value.signed_ints.push_back(in.read<std::int8_t>("INT8 value")); break;
    case GgufValueType::INT16: value.signed_ints.push_back(in.read<std::int16_t>("INT16 value")); break;
    case GgufValueType::INT32: value.signed_ints.push_back(in.read<std::int32_t>("INT32 value")); break;
    case GgufValueType::INT64: value.signed_ints.push_back(in.read<std::int64_t>("INT64 value")); break;
    case GgufValueType::FLOAT32: value.floats.push_back(in.read<float>("FLOAT32 value")); break;
    case GgufValueType::FLOAT64: value.floats.push_back(in.read<double>("FLOAT64 value")); break;
    case GgufValueType::BOOL: {
      const std::uint64_t at = in.pos();
      const auto b = in.read<std::uint8_t>("BOOL value");
      if (b > 1) in.fail(at, "BOOL value is " + std::to_string(b) + ", not 0 or 1");
      value.unsigned_ints.push_back(b);
      break;
    }
    case GgufValueType::STRING: value.strings.push_back(in.read_string("string value")); break;
    case GgufValueType::ARRAY: in.fail(in.pos(), "nested arrays are not supported");
  }
}

GgufValue read_value(Cursor& in, const std::string& key) {
  GgufValue value;
  value.file_offset = in.pos();
  const auto raw_type = in.read<std::uint32_t>("value type");
  if (!is_known_value_type(raw_type))
    in.fail(value.file_offset, "key '" + key + "' has unknown value type " + std::to_string(raw_type));
  auto type = static_cast<GgufValueType>(raw_type);
  std::uint64_t count = 1;
  if (type == GgufValueType::ARRAY) {
    value.is_array = true;
    const std::uint64_t at = in.pos();
    const auto raw_elem = in.read<std::uint32_t>("array element type");
    if (!is_known_value_type(raw_elem))
      in.fail(at, "key '" + key + "' has unknown array element type " + std::to_string(raw_elem));
    type = static_cast<GgufValueType>(raw_elem);
    if (type == GgufValueType::ARRAY) in.fail(at, "key '" + key + "' is a nested array (not supported)");
    const std::uint64_t count_at = in.pos();
    count = in.read<std::uint64_t>("array length");
    // Every element takes at least scalar_size bytes, so a count beyond this
    // bound cannot fit in the file (checked before any allocation).
    if (count > in.remaining() / scalar_size(type))
      in.fail(count_at, "key '" + key + "' array length " + std::to_string(count) + " of " +
                            to_string(type) + " cannot fit in the " + std::to_string(in.remaining()) +
                            " bytes left in the file");
  }
  value.element_type = type;
  // Reserve only a bounded amount up front: a corrupt count that still fits
  // the file must not turn into a huge allocation before parsing fails.
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(count, kMaxReserve));
  if (is_unsigned(type) || type == GgufValueType::BOOL) value.unsigned_ints.reserve(n);
  else if (is_signed(type)) value.signed_ints.reserve(n);
  else if (is_float(type)) value.floats.reserve(n);
  else value.strings.reserve(n);
  for (std::uint64_t i = 0; i < count; ++i) append_element(in, type, value);
  return value;
}

[[noreturn]] void fail_at(const GgufFile& file, std::uint64_t offset, const std::string& what) {
  throw GgufError(file.path().string() + ": " + what + " (at byte offset " + std::to_string(offset) + ")");
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out;
}

const GgmlTypeInfo* find_ggml_type(std::uint32_t type_id) {
  for (const auto& info : kTypes)
    if (static_cast<std::uint32_t>(info.type) == type_id) return &info;
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  const auto* info = find_ggml_type(static_cast<std::uint32_t>(type));
  if (!info) throw GgufError("unsupported ggml tensor type " + ggml_type_name(static_cast<std::uint32_t>(type)));
  return *info;
}

std::string ggml_type_name(std::uint32_t type_id) {
  if (const auto* info = find_ggml_type(type_id)) return info->name;
  return "type#" + std::to_string(type_id);
}

const char* to_string(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: return "UINT8";
    case GgufValueType::INT8: return "INT8";
    case GgufValueType::UINT16: return "UINT16";
    case GgufValueType::INT16: return "INT16";
    case GgufValueType::UINT32: return "UINT32";
    case GgufValueType::INT32: return "INT32";
    case GgufValueType::FLOAT32: return "FLOAT32";
    case GgufValueType::BOOL: return "BOOL";
    case GgufValueType::STRING: return "STRING";
    case GgufValueType::ARRAY: return "ARRAY";
    case GgufValueType::UINT64: return "UINT64";
    case GgufValueType::INT64: return "INT64";
    case GgufValueType::FLOAT64: return "FLOAT64";
  }
  return "UNKNOWN";
}

std::size_t GgufValue::size() const {
  return unsigned_ints.size() + signed_ints.size() + floats.size() + strings.size();
}

std::string GgufValue::type_name() const {
  return is_array ? std::string("ARRAY[") + to_string(element_type) + "]" : to_string(element_type);
}

std::uint64_t GgufTensorInfo::rows() const {
  return dims.empty() || dims[0] == 0 ? 0 : n_elements / dims[0];
}

// ---------------------------------------------------------------- reading

namespace {

FileStamp stamp_of(const struct stat& st) {
  const auto nanoseconds = [](const timespec& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; };
  return {.device = static_cast<std::uint64_t>(st.st_dev),
          .inode = static_cast<std::uint64_t>(st.st_ino),
          .size = static_cast<std::uint64_t>(st.st_size),
          .mtime_ns = nanoseconds(st.st_mtim),
          .ctime_ns = nanoseconds(st.st_ctim)};
}

// The file's `size` bytes in fresh anonymous memory (munmap to free). Throws
// GgufError when it cannot be read whole: a file that shrinks while it is
// read is being written by someone else.
const std::byte* read_whole_file(int fd, std::uint64_t size, const std::filesystem::path& path) {
  void* memory = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED)
    throw GgufError(path.string() + ": cannot allocate " + std::to_string(size) + " bytes to read it: " +
                    std::strerror(errno));
  auto* bytes = static_cast<std::byte*>(memory);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr std::uint64_t kStep = std::uint64_t{64} << 20;
  for (std::uint64_t done = 0; done < size;) {
    const ssize_t got = ::pread(fd, bytes + done, static_cast<std::size_t>(std::min(kStep, size - done)),
                                static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const std::string why = got < 0 ? std::string(std::strerror(errno))
                                      : "it ended at byte " + std::to_string(done) + " of " + std::to_string(size) +
                                            " (another program is writing or truncating it)";
      ::munmap(memory, size);
      throw GgufError(path.string() + ": cannot read the file: " + why);
    }
    done += static_cast<std::uint64_t>(got);
  }
  ::mprotect(memory, size, PROT_READ);  // nothing writes a model's bytes
  return bytes;
}

}  // namespace

GgufFile::GgufFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw GgufError(path.string() + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw GgufError(path.string() + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError(path.string() + ": not a regular file");
  }
  stamp_ = stamp_of(st);
  size_ = stamp_.size;
  try {
    if (size_ > 0) base_ = read_whole_file(fd, size_, path);
    // The bytes and the stamp the content hash is cached under must be of
    // one version of the file.
    struct stat after {};
    if (::fstat(fd, &after) != 0 || !(stamp_of(after) == stamp_))
      throw GgufError(path.string() + ": the file changed while it was read (another program is writing it); "
                      "load it again once it is complete");
  } catch (...) {
    if (base_) ::munmap(const_cast<std::byte*>(base_), size_);
    base_ = nullptr;
    ::close(fd);
    throw;
  }
  ::close(fd);
  try {
    parse();
  } catch (...) {
    if (base_) ::munmap(const_cast<std::byte*>(base_), size_);
    base_ = nullptr;
    throw;
  }
}

GgufFile::~GgufFile() {
  if (base_) ::munmap(const_cast<std::byte*>(base_), size_);
}

GgufFile::GgufFile(GgufFile&& other) noexcept { *this = std::move(other); }

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this != &other) {
    if (base_) ::munmap(const_cast<std::byte*>(base_), size_);
    path_ = std::move(other.path_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    released_ = std::exchange(other.released_, false);
    kept_ = std::move(other.kept_);
    kept_spans_ = std::move(other.kept_spans_);
    stamp_ = other.stamp_;
    version_ = other.version_;
    alignment_ = other.alignment_;
    data_offset_ = other.data_offset_;
    metadata_ = std::move(other.metadata_);
    tensors_ = std::move(other.tensors_);
    tensor_index_ = std::move(other.tensor_index_);
  }
  return *this;
}

std::span<const std::byte> GgufFile::bytes() const {
  if (released_) throw GgufError(path_.string() + ": the file's bytes were released after the model loaded");
  return {base_, static_cast<std::size_t>(size_)};
}

void GgufFile::release_tensor_data(const std::function<bool(const GgufTensorInfo&)>& keep) {
  if (released_) return;
  std::size_t total = 0;
  for (const GgufTensorInfo& info : tensors_)
    if (info.type && keep(info)) total += static_cast<std::size_t>(info.n_bytes);
  kept_ = std::make_unique<std::byte[]>(total);
  kept_spans_.assign(tensors_.size(), {});
  std::size_t at = 0;
  for (std::size_t t = 0; t < tensors_.size(); ++t) {
    const GgufTensorInfo& info = tensors_[t];
    if (!info.type || !keep(info)) continue;
    const std::span<const std::byte> data = tensor_data(info);
    std::memcpy(kept_.get() + at, data.data(), data.size());
    kept_spans_[t] = {kept_.get() + at, data.size()};
    at += data.size();
  }
  if (base_) ::munmap(const_cast<std::byte*>(base_), size_);
  base_ = nullptr;
  released_ = true;
}

void GgufFile::fail(std::uint64_t offset, const std::string& what) const { fail_at(*this, offset, what); }

// ---------------------------------------------------------------- parsing

void GgufFile::parse() {
  Cursor in(base_, size_, *this, &fail_at);
  in.need(4, "magic");
  if (std::memcmp(base_, "GGUF", 4) != 0) fail(0, "bad magic: not a GGUF file");
  in.read<std::uint32_t>("magic");
  version_ = in.read<std::uint32_t>("version");
  if (version_ == 0x03000000u) fail(4, "big-endian GGUF files are not supported");
  if (version_ != 3) fail(4, "unsupported GGUF version " + std::to_string(version_) + " (this reader reads version 3)");
  const std::uint64_t tensor_count_at = in.pos();
  const auto tensor_count = in.read<std::uint64_t>("tensor count");
  const std::uint64_t kv_count_at = in.pos();
  const auto kv_count = in.read<std::uint64_t>("metadata count");
  // Lower bounds on the encoded size: kv = key length + type + 1 byte;
  // tensor info = name length + n_dims + type + offset.
  if (kv_count > in.remaining() / 13)
    fail(kv_count_at, "metadata count " + std::to_string(kv_count) + " cannot fit in the file");
  if (tensor_count > in.remaining() / 24)
    fail(tensor_count_at, "tensor count " + std::to_string(tensor_count) + " cannot fit in the file");

  for (std::uint64_t i = 0; i < kv_count; ++i) {
    const std::uint64_t key_at = in.pos();
    std::string key = in.read_string("metadata key");
    if (metadata_.count(key)) fail(key_at, "duplicate metadata key '" + key + "'");
    GgufValue value = read_value(in, key);
    metadata_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* align = find("general.alignment")) {
    if (align->is_array || align->element_type != GgufValueType::UINT32)
      fail(align->file_offset, "general.alignment must be UINT32, found " + align->type_name());
    const std::uint64_t a = align->unsigned_ints.at(0);
    if (a == 0 || (a & (a - 1)) != 0)
      fail(align->file_offset, "general.alignment " + std::to_string(a) + " is not a power of two");
    alignment_ = a;
  }

  tensors_.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(tensor_count, kMaxReserve)));
  const auto read_tensor_table = [&] {
    for (std::uint64_t i = 0; i < tensor_count; ++i) {
      GgufTensorInfo info;
      info.info_offset = in.pos();
      info.name = in.read_string("tensor name");
      if (tensor_index_.count(info.name)) fail(info.info_offset, "duplicate tensor name '" + info.name + "'");
      const std::string label = "tensor '" + info.name + "'";
      const std::uint64_t dims_at = in.pos();
      const auto n_dims = in.read<std::uint32_t>("tensor dimension count");
      if (n_dims == 0 || n_dims > kMaxDims)
        fail(dims_at, label + " has " + std::to_string(n_dims) + " dimensions (1.." + std::to_string(kMaxDims) + " allowed)");
      info.n_elements = 1;
      for (std::uint32_t d = 0; d < n_dims; ++d) {
        const std::uint64_t dim_at = in.pos();
        const auto dim = in.read<std::uint64_t>("tensor dimension");
        if (dim == 0) fail(dim_at, label + " dimension " + std::to_string(d) + " is 0: the tensor would hold nothing");
        if (dim > kInt64Max || mul_overflows(info.n_elements, dim, info.n_elements) || info.n_elements > kInt64Max)
          fail(dim_at, label + " dimension " + std::to_string(d) + " = " + std::to_string(dim) +
                           " makes the element count overflow");
        info.dims.push_back(dim);
      }
      const std::uint64_t type_at = in.pos();
      info.type_id = in.read<std::uint32_t>("tensor type");
      info.type = find_ggml_type(info.type_id);
      const std::uint64_t offset_at = in.pos();
      info.offset = in.read<std::uint64_t>("tensor data offset");
      if (info.offset % alignment_ != 0)
        fail(offset_at, label + " data offset " + std::to_string(info.offset) + " is not a multiple of the alignment " +
                            std::to_string(alignment_));
      if (info.type) {
        if (info.dims[0] % info.type->block_elems != 0)
          fail(type_at, label + " row length " + std::to_string(info.dims[0]) + " is not a multiple of the " +
                            info.type->name + " block size " + std::to_string(info.type->block_elems));
        if (mul_overflows(info.n_elements / info.type->block_elems, info.type->block_bytes, info.n_bytes))
          fail(type_at, label + " byte size overflows");
      }
      tensor_index_.emplace(info.name, tensors_.size());
      tensors_.push_back(std::move(info));
    }
  };
  try {
    read_tensor_table();
  } catch (const GgufError& e) {
    // A model file always has metadata; with a count of 0 the tensor table
    // is read from the metadata's bytes, and the error names the wrong field.
    if (kv_count != 0) throw;
    throw GgufError(std::string(e.what()) + " (the header declares 0 metadata entries at byte " +
                    std::to_string(kv_count_at) + "; if that count is wrong, the tensor table was read from where " +
                    "the metadata is)");
  }

  // The data section starts at the next multiple of the alignment.
  const std::uint64_t header_end = in.pos();
  std::uint64_t padded = 0;
  if (add_overflows(header_end, alignment_ - 1, padded)) fail(header_end, "data section offset overflows");
  data_offset_ = padded / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > size_)
    fail(header_end, "data section would start at " + std::to_string(data_offset_) + ", past the end of the " +
                         std::to_string(size_) + "-byte file");
  const std::uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (const auto& info : tensors_) {
    std::uint64_t end = 0;
    if (add_overflows(info.offset, info.n_bytes, end) || end > data_size)
      fail(info.info_offset, "tensor '" + info.name + "' data [" + std::to_string(info.offset) + ", +" +
                                 std::to_string(info.n_bytes) + ") lies outside the " + std::to_string(data_size) +
                                 "-byte data section");
  }
  check_tensor_layout(data_size);
}

// Tensors are stored one after another, each padded to the alignment. A
// data range shared by two tensors, or a gap longer than the padding after
// one, means an offset, type or shape field lies: a type id swapped for a
// smaller type leaves exactly such a gap and would reinterpret the bytes.
// Tensors of unsupported types have no known size and bound no gap.
void GgufFile::check_tensor_layout(std::uint64_t data_size) const {
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& info : tensors_)
    if (info.n_bytes > 0 || !info.type) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->info_offset < b->info_offset;
  });
  const auto gap_error = [&](const GgufTensorInfo& info, std::uint64_t next_start, const std::string& next) {
    fail(info.info_offset, "tensor '" + info.name + "' (" + info.type->name + ", " + std::to_string(info.n_bytes) +
                               " bytes at data offset " + std::to_string(info.offset) + ") is followed by " +
                               std::to_string(next_start - info.offset - info.n_bytes) + " unused bytes before " +
                               next + ": its type or shape does not match the stored data");
  };
  for (std::size_t i = 0; i < by_offset.size(); ++i) {
    const GgufTensorInfo& info = *by_offset[i];
    const std::uint64_t end = info.offset + info.n_bytes;  // in range: checked by parse()
    const GgufTensorInfo* next = i + 1 < by_offset.size() ? by_offset[i + 1] : nullptr;
    if (next && next->offset < end)
      fail(next->info_offset, "tensor '" + next->name + "' data offset " + std::to_string(next->offset) +
                                  " overlaps tensor '" + info.name + "' at [" + std::to_string(info.offset) + ", " +
                                  std::to_string(end) + ")");
    if (!info.type) continue;
    const std::uint64_t next_start = next ? next->offset : data_size;
    if (next_start - end >= alignment_)
      gap_error(info, next_start, next ? "tensor '" + next->name + "'" : std::string("the end of the file"));
  }
}

namespace {

bool f16_is_finite(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return (h & 0x7C00u) != 0x7C00u;
}
bool bf16_is_finite(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return (h & 0x7F80u) != 0x7F80u;
}
bool f32_is_finite(const std::byte* p) {
  std::uint32_t u;
  std::memcpy(&u, p, 4);
  return (u & 0x7F800000u) != 0x7F800000u;
}

// Index of the first block whose dequantised values are not all finite, or
// npos. Quantised values are (fp16 scale) x (small integer) [+ fp16 min], so
// a block is finite exactly when its fp16 scale fields are; float types need
// every element checked.
std::size_t first_non_finite_block(GgmlType type, const std::byte* data, std::uint64_t blocks, std::uint32_t block_bytes) {
  const auto scan = [&](auto&& block_finite) -> std::size_t {
    for (std::uint64_t b = 0; b < blocks; ++b)
      if (!block_finite(data + b * block_bytes)) return static_cast<std::size_t>(b);
    return std::string::npos;
  };
  switch (type) {
    case GgmlType::F32: return scan(f32_is_finite);
    case GgmlType::F16: return scan(f16_is_finite);
    case GgmlType::BF16: return scan(bf16_is_finite);
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: return scan(f16_is_finite);  // d at byte 0
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:  // d, then min (Q4_1, Q5_1) / dmin (Q4_K, Q5_K) at byte 2
      return scan([](const std::byte* p) { return f16_is_finite(p) && f16_is_finite(p + 2); });
    case GgmlType::Q2_K:  // d, dmin after scales[16] and qs[64]
      return scan([](const std::byte* p) { return f16_is_finite(p + 80) && f16_is_finite(p + 82); });
    case GgmlType::Q3_K: return scan([](const std::byte* p) { return f16_is_finite(p + 108); });  // d after hmask, qs, scales
    case GgmlType::Q6_K: return scan([](const std::byte* p) { return f16_is_finite(p + 208); });  // d after ql, qh, scales
  }
  return std::string::npos;
}

}  // namespace

void GgufFile::require_finite(const GgufTensorInfo& info) const {
  const auto data = tensor_data(info);
  const std::uint64_t blocks = info.n_bytes / info.type->block_bytes;
  const std::size_t bad = first_non_finite_block(info.type->type, data.data(), blocks, info.type->block_bytes);
  if (bad == std::string::npos) return;
  const std::uint64_t element = static_cast<std::uint64_t>(bad) * info.type->block_elems;
  fail(data_offset_ + info.offset + static_cast<std::uint64_t>(bad) * info.type->block_bytes,
       "tensor '" + info.name + "' has a non-finite value (NaN or infinity) " +
           (info.type->block_elems == 1 ? "at element " + std::to_string(element)
                                        : "in the " + std::string(info.type->name) + " block of elements " +
                                              std::to_string(element) + ".." +
                                              std::to_string(element + info.type->block_elems - 1)));
}

// ---------------------------------------------------------------- tensors

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (!info) throw GgufError(path_.string() + ": tensor '" + std::string(name) + "' is missing");
  return *info;
}

std::span<const std::byte> GgufFile::tensor_data(const GgufTensorInfo& info) const {
  if (!info.type)
    fail(info.info_offset, "tensor '" + info.name + "' has type " + ggml_type_name(info.type_id) +
                               ", which the engine does not support (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)");
  if (released_) {
    const auto found = tensor_index_.find(info.name);
    if (found != tensor_index_.end() && !kept_spans_[found->second].empty()) return kept_spans_[found->second];
    throw GgufError(path_.string() + ": tensor '" + info.name +
                    "': its bytes were released after the model loaded (the engine keeps only what it reads again)");
  }
  return {base_ + data_offset_ + info.offset, static_cast<std::size_t>(info.n_bytes)};
}

}  // namespace midtune
