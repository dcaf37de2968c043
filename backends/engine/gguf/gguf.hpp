// GGUF v3 reader: a memory-mapped model file whose every
// header field, count, length, dimension, type and offset is checked against
// the file size before use. A corrupt or truncated file throws GgufError
// naming the file, what was wrong and the byte offset.
//
// Layout (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):
//   magic "GGUF", u32 version (3), u64 tensor_count, u64 kv_count,
//   kv_count x {string key, u32 value_type, value},
//   tensor_count x {string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset},
//   padding to general.alignment (default 32), tensor data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backends/engine/gguf/ffn_activation.hpp"
#include "backends/engine/gguf/rope_pairing.hpp"

namespace midtune {

// `text` with every control byte (below 0x20, and 0x7f) written as \xNN.
std::string printable(std::string_view text);

struct GgufError : std::runtime_error {
  // Key and tensor names come from the file and may hold any byte: escaped,
  // they can neither move a terminal's cursor nor hide the rest of the message.
  explicit GgufError(const std::string& what) : std::runtime_error(printable(what)) {}
};

// ggml tensor types the engine supports (values are ggml's enum ggml_type).
enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
};

// Storage of one type: `block_elems` consecutive elements of a row are stored
// in `block_bytes` bytes (1 and sizeof(element) for the float types).
struct GgmlTypeInfo {
  GgmlType type;
  const char* name;
  std::uint32_t block_elems;
  std::uint32_t block_bytes;
};

// The block table; nullptr for a type id the engine does not support.
const GgmlTypeInfo* find_ggml_type(std::uint32_t type_id);
// Throws GgufError for an unsupported type id.
const GgmlTypeInfo& ggml_type_info(GgmlType type);
// "Q4_1", or "type#17" for an id outside the table.
std::string ggml_type_name(std::uint32_t type_id);

enum class GgufValueType : std::uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* to_string(GgufValueType type);

// One metadata value. A scalar is stored as a one-element array with
// is_array == false, so scalars and arrays share the storage below; exactly
// one of the vectors is used, chosen by element_type:
//   UINT8/16/32/64, BOOL -> unsigned_ints;  INT8/16/32/64 -> signed_ints;
//   FLOAT32/64 -> floats;  STRING -> strings.
// Nested arrays are rejected by the reader (no model uses them).
struct GgufValue {
  bool is_array = false;
  GgufValueType element_type = GgufValueType::UINT8;
  std::uint64_t file_offset = 0;  // where the value starts (for messages)
  std::vector<std::uint64_t> unsigned_ints;
  std::vector<std::int64_t> signed_ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  std::size_t size() const;  // element count (1 for a scalar)
  // "UINT32" or "ARRAY[STRING]".
  std::string type_name() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  // ggml order: dims[0] is contiguous (row length)
  std::uint32_t type_id = 0;        // raw ggml type id
  const GgmlTypeInfo* type = nullptr;  // nullptr when the engine does not support type_id
  std::uint64_t offset = 0;         // from the start of the data section
  std::uint64_t n_elements = 0;
  std::uint64_t n_bytes = 0;        // 0 when the type is unsupported
  std::uint64_t info_offset = 0;    // where the tensor info starts in the file

  std::uint64_t rows() const;       // n_elements / dims[0] (0 for an empty tensor)
};

// Which file was opened, as fstat saw its descriptor: the key under
// which the file's content hash is cached (a file written again gets a new
// modification or status-change time, a replaced one a new inode).
struct FileStamp {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

// A GGUF file read whole into this process's private memory (not mapped):
// whatever another program does to the file afterwards (writes it in place,
// truncates it, replaces it) never changes what the engine computes with, nor
// the content hash taken of these bytes, and never faults the process
// (SIGBUS) as a truncated mapping would. A model drops the bytes it no longer
// reads once loaded (release_tensor_data).
class GgufFile {
 public:
  // Reads and parses the whole file; throws GgufError on any inconsistency,
  // and when the file changed while it was being read.
  explicit GgufFile(const std::filesystem::path& path);
  ~GgufFile();
  GgufFile(GgufFile&& other) noexcept;
  GgufFile& operator=(GgufFile&& other) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t file_size() const { return size_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }
  const FileStamp& stamp() const { return stamp_; }
  // Every byte of the file (header, metadata, tensor table, tensor data).
  // Throws GgufError after release_tensor_data.
  std::span<const std::byte> bytes() const;

  // --- metadata ---
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters: throw GgufError naming the file and key when the key is
  // missing, has another type, is an array where a scalar is asked (or the
  // reverse) or the value does not fit the result.
  std::uint64_t get_uint(std::string_view key) const;   // any unsigned or non-negative signed int
  std::int64_t get_int(std::string_view key) const;     // any integer type that fits
  double get_float(std::string_view key) const;         // FLOAT32 / FLOAT64
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  std::vector<std::int64_t> get_int_array(std::string_view key) const;  // any integer element type
  std::vector<float> get_float_array(std::string_view key) const;
  // Same, with a default when the key is absent (a present key of the wrong
  // type is still an error).
  std::uint64_t get_uint_or(std::string_view key, std::uint64_t fallback) const;
  double get_float_or(std::string_view key, double fallback) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;

  // --- tensors ---
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& tensor(std::string_view name) const;  // throws if absent
  // The tensor's bytes; throws GgufError if its type is unsupported or its
  // bytes were released. The span lives as long as this GgufFile.
  std::span<const std::byte> tensor_data(const GgufTensorInfo& info) const;
  // Frees the file's bytes except the tensors `keep` accepts (those read
  // again after a model has loaded); metadata and the tensor table stay.
  // Afterwards bytes() and tensor_data() of any other tensor throw GgufError
  // naming the tensor: a read of freed bytes is an error, never garbage.
  void release_tensor_data(const std::function<bool(const GgufTensorInfo&)>& keep);
  // Throws GgufError naming the tensor and element when any of its values
  // dequantises to NaN or infinity (reads only the scale fields of quantised
  // blocks, so it costs a fraction of a pass over the tensor).
  void require_finite(const GgufTensorInfo& info) const;

 private:
  void parse();
  void check_tensor_layout(std::uint64_t data_size) const;
  [[noreturn]] void fail(std::uint64_t offset, const std::string& what) const;
  [[noreturn]] void fail_key(std::string_view key, const std::string& what) const;
  const GgufValue& require(std::string_view key) const;
  const GgufValue& require_scalar(std::string_view key) const;

  std::filesystem::path path_;
  const std::byte* base_ = nullptr;  // the whole file, private anonymous memory; null once released
  std::uint64_t size_ = 0;
  // After release_tensor_data: the kept tensors' bytes, and each tensor's
  // span in them (empty for a released tensor), indexed like tensors_.
  bool released_ = false;
  std::unique_ptr<std::byte[]> kept_;
  std::vector<std::span<const std::byte>> kept_spans_;
  FileStamp stamp_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};


// The architectures the engine runs, as `general.architecture` names them.
inline constexpr const char* kSupportedArchitectures = "llama, qwen2, gemma, qwen3, gemma2, gemma3, mpt, phi3";

// Architecture hyper-parameters, read from `<arch>.*` keys (llama family).
// The fields after tied_output are what an architecture changes; their
// defaults are plain llama's.
struct ModelConfig {
  std::string arch;               // general.architecture
  std::uint32_t layers = 0;       // <arch>.block_count
  std::uint32_t heads = 0;        // <arch>.attention.head_count
  std::uint32_t kv_heads = 0;     // <arch>.attention.head_count_kv (default: heads)
  std::uint32_t head_dim = 0;     // <arch>.attention.key_length (default: hidden / heads)
  std::uint32_t hidden = 0;       // <arch>.embedding_length
  std::uint32_t ffn = 0;          // <arch>.feed_forward_length
  std::uint32_t rope_dims = 0;    // <arch>.rope.dimension_count (default: head_dim); 0: no RoPE (mpt)
  float rope_base = 10000.0f;     // <arch>.rope.freq_base (default 10000)
  float rms_eps = 1e-5f;          // <arch>.attention.layer_norm_rms_epsilon (mpt: layer_norm_epsilon)
  std::uint32_t context_length = 0;  // <arch>.context_length
  std::uint32_t vocab = 0;        // <arch>.vocab_size, else len(tokenizer.ggml.tokens)
  bool tied_output = false;       // true when output.weight is absent
  RopePairing rope_pairing = RopePairing::adjacent;     // from the architecture
  FfnActivation ffn_activation = FfnActivation::silu;   // from the architecture
  float embedding_scale = 1.0f;   // token embeddings times this (gemma: sqrt(hidden))
  float rope_freq_scale = 1.0f;   // <arch>.rope.scaling.type linear: 1 / rope.scaling.factor
  std::uint32_t sliding_window = 0;  // <arch>.attention.sliding_window: keys a query sees (0 = all)
  // Per-head RMSNorm of the Q and K rows before RoPE (qwen3, gemma3: the
  // attn_q_norm / attn_k_norm weights, head_dim each).
  bool qk_norm = false;
  float attention_scale = 0.0f;   // softmax(scale * q.k): 1 / sqrt(head_dim) (gemma3 27B: sqrt(hidden / heads))
  // RMSNorm of the attention's and the FFN's output before each residual
  // add (gemma3: post_attention_norm, post_ffw_norm).
  bool post_norms = false;
  // Layers of two kinds (gemma3): local_layers[l] = 1 for a sliding-window
  // layer, which turns RoPE at rope_base_local without the linear scaling;
  // the others attend to every key. Empty: every layer alike (the
  // sliding window, if any, in all of them).
  std::vector<std::uint8_t> local_layers;
  float rope_base_local = 10000.0f;  // <arch>.rope.freq_base_swa
  // One ffn_up tensor of 2 x ffn rows, the gate's rows then the up's, and no
  // ffn_gate (phi3, as llama.cpp's ggml_swiglu halves it: silu of the first).
  bool fused_gate_up = false;
  float rope_freq_scale_local = 1.0f;  // the local layers' linear RoPE scaling (gemma2: the model's; gemma3: none)
  // Score shaping in attention (elementwise::ScoreShaping; 0 = off):
  // gemma2's soft-cap of the scaled scores (<arch>.attn_logit_softcapping,
  // default 50) and MPT's ALiBi (<arch>.attention.max_alibi_bias).
  float attn_softcap = 0.0f;
  float max_alibi_bias = 0.0f;
  // cap * tanh(logit / cap) on the output logits (<arch>.final_logit_softcapping:
  // gemma2 default 30, gemma3 where set; 0 = none).
  float final_softcap = 0.0f;
  // MPT: the Q|K|V rows (after the bias) clamped to [-clamp_kqv, clamp_kqv]
  // (<arch>.attention.clamp_kqv; 0 = none), LayerNorm (with its optional
  // biases) for every norm, and an ungated FFN down(gelu(up x + b)) + b.
  float clamp_kqv = 0.0f;
  bool layer_norm = false;
  bool gated_ffn = true;
  bool has_rope() const { return rope_dims != 0; }
  bool is_local(std::uint32_t layer) const { return !local_layers.empty() && local_layers[layer] != 0; }
  // The keys a query of `layer` sees (0 = all).
  std::uint32_t layer_window(std::uint32_t layer) const {
    return local_layers.empty() || local_layers[layer] != 0 ? sliding_window : 0;
  }
  bool operator==(const ModelConfig&) const = default;
};

// 1 + the largest N among the tensors named "blk.N.<...>" (0 when none):
// the layers the file holds, to check block_count against before anything
// is sized by it.
std::uint64_t count_layer_blocks(const GgufFile& file);

// Throws GgufError when a required key is missing or the values are
// inconsistent (heads not a multiple of kv_heads, zero sizes, ...).
ModelConfig read_model_config(const GgufFile& file);

}  // namespace midtune
