// What the model (model.hpp) runs on: one Device body per kind of hardware,
// one forward pass for all of them, as CTranslate2 runs one layer code on
// every device. The bodies:
//   CpuDevice (cpu/)                the CPU engine: the packed int8 / float
//                                   matrices per ISA, the tiled attention
//                                   over transposed keys, TBB threads;
//   ReferenceOps (reference/)       the host reference the GPU is tested
//                                   against: bf16 weights, row-major KV;
//   CudaOps (cuda/)                 an NVIDIA GPU, the same layout as the
//                                   reference.
// The last two share DeviceOps (device_ops.hpp), the GPU family's form.
// A device owns the form of its weights (DeviceMatrix, DeviceEmbedding) and
// of a sequence's KV cache (LayerKv): the model never reads either, it only
// hands them back to the device's ops.
//
// Pointers are device pointers; matrices are row-major with the stated row
// strides (in elements). Calls may be asynchronous: download() and
// synchronize() wait for what came before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/gguf/rope_pairing.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/op_target.hpp"
#include "backends/engine/ops/packed_matrix.hpp"

namespace midtune::engine {

using elementwise::ScoreShaping;

// A weight matrix (rows x cols) in the form the device multiplies with.
class DeviceMatrix {
 public:
  virtual ~DeviceMatrix() = default;
  virtual int rows() const = 0;
  virtual int cols() const = 0;
  virtual std::size_t bytes() const = 0;  // device memory it takes
};

// The token embedding table in the form the device reads rows from.
class DeviceEmbedding {
 public:
  virtual ~DeviceEmbedding() = default;
  virtual std::size_t bytes() const = 0;  // device memory it takes
};

// The element of the KV caches a device makes: fp32, or bf16 (keys and
// values rounded once to nearest even as cached, read as exact floats; half
// the memory and the attention's memory traffic, other numbers).
enum class KvForm { fp32, bf16 };
// "fp32" | "bf16" (backend.kv_cache, --kv-cache); anything else throws
// std::invalid_argument naming `where` and the choices.
KvForm parse_kv_form(const std::string& name, const std::string& where);
const char* to_string(KvForm form);

// One layer's KV cache of one sequence, in the device's layout. A slot is a
// KV head, or a query head in layers whose heads of one GQA group have
// different RoPE scales (Ms-PoE): there the group's keys are rotated per
// head, so each query head sees keys rotated like itself.
class LayerKv {
 public:
  LayerKv(int capacity, int slots, int kv_heads, int head_dim)
      : capacity(capacity), slots(slots), kv_heads(kv_heads), head_dim(head_dim) {}
  virtual ~LayerKv() = default;
  const int capacity, slots, kv_heads, head_dim;
  // The KV head whose keys and values slot `slot` holds.
  int kv_head_of_slot(int slot) const { return slots == kv_heads ? slot : slot / (slots / kv_heads); }
  // Where per-head RoPE tables (one of `table_size` floats per query head)
  // are laid out, the stride from slot s's table to slot s+1's: a slot
  // reads the table of the first query head it serves.
  std::size_t slot_table_stride(int heads, std::size_t table_size) const {
    return slots == heads ? table_size : table_size * static_cast<std::size_t>(heads / kv_heads);
  }
};

// One sequence of a batched attention step (Device::decode_attention): its
// `tokens` rows are rows [row, row + tokens) of the batch's packed matrices
// and go to its cache rows [past, past + tokens).
struct DecodeSequence {
  LayerKv* kv = nullptr;
  int row = 0, tokens = 0, past = 0;
  const float* scales = nullptr;       // the layer's RoPE scale of each query head (device)
  const float* host_scales = nullptr;  // the same values on the host
};

// One layer's attention for several sequences at once, as the model runs
// it per sequence without hooks: values and rotated keys cached, queries
// rotated, causal attention over each sequence's own cache. Query head h
// rotates with scales[h]; key slot s with the scale of the first query head
// it serves (slot s of a per-head layer: head s; of a GQA layer: head
// s * heads / kv_heads), as the tables of cache_keys / rope_rows give them.
struct DecodeBatch {
  const float* qkv = nullptr;  // packed rows: Q (heads), K, V (kv_heads each), head_dim values a head
  std::size_t qkv_ld = 0;
  const double* positions = nullptr;            // one per packed row (device)
  const double* inverse_frequencies = nullptr;  // rope_dims / 2 of them (device); unused when rope_dims is 0
  int rope_dims = 0;
  RopePairing pairing = RopePairing::adjacent;
  int heads = 0, kv_heads = 0, head_dim = 0;
  int window = 0;  // attention's sliding window (0: none)
  float scale = 1.0f;
  ScoreShaping shaping;
  float* q_rot = nullptr;  // the rotated queries, written (packed rows)
  std::size_t q_rot_ld = 0;
  float* out = nullptr;  // the attention output rows, written (packed rows)
  std::size_t out_ld = 0;
  std::vector<DecodeSequence> sequences;
};

// What an attention call reads out besides its output rows, each where
// its pointer is set.
struct AttentionReadouts {
  // Each query's weight on key 0, [h * tokens + t] (SIW corrects it).
  float* key0_weight = nullptr;
  // The last query's weights over every key, [h * (past + tokens) + k], 0
  // outside the window (Ms-PoE's awareness, SIW's density).
  float* last_row = nullptr;
  // Each query's log of its softmax's denominator, log sum_k exp(score_k)
  // over the keys it sees, [h * tokens + t]: two attentions over disjoint
  // key sets merge into the attention over both with it (merge_attention.hpp).
  float* log_sum_exp = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // The largest head dimension the attention bodies take.
  virtual std::uint32_t max_head_dim() const = 0;
  // Whether load_matrix may run on several threads at once.
  virtual bool loads_in_parallel() const { return false; }

  // ---- memory
  virtual void* allocate(std::size_t bytes) = 0;  // throws std::runtime_error naming the size when out of memory
  virtual void release(void* pointer) noexcept = 0;
  virtual void upload(void* device, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* device, std::size_t bytes) = 0;
  // `rows` rows of `row_bytes` from src (pitch in bytes) to dst.
  virtual void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t row_bytes, int rows) = 0;
  virtual void synchronize() = 0;
  // Bytes still free on the device (a host device: what the machine has).
  virtual std::size_t free_bytes() const = 0;

  // ---- weights, from the mapped GGUF (the parts stay valid while the call runs)
  // Parts stacked one below the other, all of `cols` columns. Throws
  // std::invalid_argument for a type the device cannot take.
  virtual std::unique_ptr<DeviceMatrix> load_matrix(const std::vector<MatrixPart>& parts, int cols) = 0;
  // The rows of `table` (table.rows rows of `width` values, `row_bytes`
  // each in the file) stay readable while the model lives (the file stays
  // mapped).
  virtual std::unique_ptr<DeviceEmbedding> load_embedding(const MatrixPart& table, int width,
                                                          std::size_t row_bytes) = 0;

  // ---- ops
  // Where the ops over plain rows run on this device (ops/op_target.hpp):
  // the norms, RoPE, the activation, the row updates, the methods' readouts
  // and scoring are ops::<op>(device.op_target(), ...), written once for
  // every device in ops/. The ops below work on the device's own forms.
  virtual OpTarget op_target() const = 0;
  // out[i] = table[tokens[i]] * scale.
  virtual void embed(const DeviceEmbedding& table, const std::int32_t* tokens, int count, float scale, float* out) = 0;
  // y[r][o] = x[r][:] . w[o][:] for r < rows, o < w.rows() (the device's
  // precision: int8 or fp32 activations on the CPU, bf16 on the GPU).
  virtual void matmul(const DeviceMatrix& w, const float* x, std::size_t ld_x, int rows, float* y,
                      std::size_t ld_y) = 0;

  // ---- the KV cache
  virtual std::unique_ptr<LayerKv> make_layer_kv(int capacity, int slots, int kv_heads, int head_dim) = 0;
  // Bytes one cached key or value element takes in the caches this device
  // makes now (fp32: 4; the GPU family's bf16 cache: 2).
  virtual std::size_t kv_value_bytes() const { return sizeof(float); }
  // Keys of `tokens` rows (kv_heads x head_dim each, rows `ld` apart) into
  // the cache rows [start, start + tokens) of every slot, slot s rotated with
  // the table at cos_sin + s * slot_table_stride (ops::rope_rows' table layout).
  virtual void cache_keys(LayerKv& kv, int start, const float* keys, std::size_t ld, int tokens, int rope_dims,
                          RopePairing pairing, const float* cos_sin, std::size_t slot_table_stride) = 0;
  virtual void cache_values(LayerKv& kv, int start, const float* values, std::size_t ld, int tokens) = 0;
  // Causal attention of `tokens` queries at positions past..past+tokens-1
  // (heads x head_dim per row) over the cached keys [0, past + tokens), within
  // the last `window` keys (0: all), the scaled scores shaped by `shaping`
  // (soft-cap, ALiBi with head h's slope among `heads`; off: untouched).
  // Where asked, the readouts (AttentionReadouts).
  virtual void attention(const float* q, std::size_t q_ld, const LayerKv& kv, int tokens, int past, int heads,
                         int window, float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                         const AttentionReadouts& readouts) = 0;
  // Every sequence of `batch` as ops::rope_tables, cache_values, cache_keys,
  // ops::rope_rows of a copy of its queries into q_rot and attention (no
  // readouts) give it, one sequence after the other (device.cpp: the body
  // of every device that has no faster one). A GPU body does each op for
  // the whole batch in one launch: a decode step is dozens of sequences of
  // one token, each op on one of them far too small to fill the device.
  virtual void decode_attention(const DecodeBatch& batch);
  // SIW: out[t][h] += (factors[t] - 1) * key0_weight[h * tokens + t] * value 0 of head h's slot.
  virtual void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, const LayerKv& kv,
                                   const float* key0_weight, const float* factors) = 0;
};

// A typed allocation on one device, released with it.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& device, std::size_t count) : device_(&device), count_(count) {
    if (count > 0) data_ = static_cast<T*>(device.allocate(count * sizeof(T)));
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      device_ = other.device_;
      data_ = other.data_;
      count_ = other.count_;
      other.data_ = nullptr;
      other.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  // Grows (contents lost) to hold at least `count` elements.
  void ensure(Device& device, std::size_t count) {
    if (count > count_ || device_ != &device) *this = DeviceBuffer(device, count);
  }
  void reset() {
    if (data_ != nullptr) device_->release(data_);
    data_ = nullptr;
    count_ = 0;
  }

 private:
  Device* device_ = nullptr;
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace midtune::engine
