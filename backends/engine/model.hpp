// The model: one forward pass for every device (device.hpp), read top to
// bottom like llama2.c's run.c: embedding (x embedding_scale) -> per layer
// [norm -> QKV (+ bias) (-> clamp) -> per-head Q/K RMSNorm (if any) -> RoPE
// (the layer's base; none with ALiBi) -> causal GQA attention (within the
// layer's sliding window, if any; scores soft-capped or ALiBi-biased where
// the architecture says) -> output projection (+ bias) (-> RMSNorm) ->
// residual -> norm -> SwiGLU, GeGLU or plain GELU FFN (-> RMSNorm) ->
// residual] -> final norm -> tied or separate output matrix (-> soft-cap);
// norms are RMSNorm, or LayerNorm with biases (mpt). What an architecture
// changes (llama, qwen2, gemma, qwen3, gemma2, gemma3, mpt, phi3) is in
// ModelConfig (backends/engine/gguf/gguf.hpp) and the few lines that read
// it; how an op runs is the device's.
//
// One call runs several sequences at once: their new tokens are packed into
// one token matrix (variable lengths, no padding) for the embedding, the
// norms, the projections and the feed-forward block. RoPE, the KV cache and
// attention run per sequence where a hook acts between those ops in that
// layer or the call is long; the other sequences of the layer, a decode
// step's, go to the device together (Device::decode_attention). Logits are computed only for
// the rows asked for and stay on the device, where score() reduces each row
// to its argmax and a gold log-probability. The CPU engine calls it one
// sequence at a time (forward(Sequence&, ...)), in prefill_chunk pieces.
//
// Positions are floats (CALIOPE remaps them) and every (layer, head) has its
// own RoPE scale (PI / LPES / Ms-PoE divide the position by it), on top of
// the model's own frequencies:
//   angle_i = (pos / scale[layer][head]) * base^(-2i / rope_dims) * freq_scale / freq_factor[i]
// (freq_factor: Llama-3.1's rope_freqs.weight, else 1; freq_scale: linear
// RoPE scaling, else 1).
//
// KV cache: keys are cached already rotated, per "key slot" (LayerKv). In a
// layer where every head of a GQA group shares one scale (the plain model,
// PI, LPES) there is one slot per KV head; where the scales differ inside a
// group, or the Sequence asks for it (SequenceScales::per_head_key_slots,
// Ms-PoE), each query head gets its own slot, its keys rotated at that
// head's scale. Scales are fixed for the life of a Sequence (Ms-PoE fixes
// them at prefill), so cached keys never need re-rotation.
//
// Hooks (ForwardHooks, from hooks::EngineIntervention) run per sequence,
// with the few rows they read copied to the host (the last query's rows,
// heads x keys) and the few values they return copied back.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backends/engine/devices/device.hpp"
#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/op_profile.hpp"
#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

// Attention whose relative positions are piecewise in the query-key
// distance d (in tokens of the sequence): a key with d < near_window is seen
// at its own position, a farther one at a remapped position, the query at
// floor(p_q / group) + query_shift and the key at floor(p_k / group) (p: the
// positions the call gives). SelfExtend (Jin et al. 2024) groups the far
// keys (group G, query_shift W - floor(W / G)); STRING (An et al. 2024)
// shifts the far distances down by S - W (group 1, query_shift W - S).
// Computed as two attentions, near and far, merged (ops/merge_attention.hpp).
struct DistanceRemap {
  int near_window = 0;  // 0: off
  int group = 1;
  double query_shift = 0.0;
  // Off also where it moves nothing (G 1, no shift: SelfExtend's G = 1,
  // STRING's S = W), so such a setting is the plain model bit for bit,
  // not the same attention split in two and merged.
  bool on() const { return near_window > 0 && (group != 1 || query_shift != 0.0); }
  double far_query_position(double p) const { return std::floor(p / group) + query_shift; }
  double far_key_position(double p) const { return std::floor(p / group); }
  // Far keys at other positions than the cached ones (a second key cache).
  bool moves_keys() const { return group != 1; }
};

// What a sequence fixes for its life, before any pass, and every layer
// reads: its RoPE scales, scale[layer * heads + head] (every entry finite
// and > 0), its attention logits' factor per layer, the layers whose keys
// are cached per query head, and its distance remap (built from an
// Intervention by hooks::sequence_scales).
struct SequenceScales {
  int layers = 0;
  int heads = 0;
  std::vector<float> scale;
  // A factor on each layer's attention logits, q . k times the model's
  // attention scale times this (size = layers; empty = 1 everywhere): an
  // attention temperature t is the factor 1 / t. A layer whose factor is
  // not 1 runs its attention per sequence, not in a decode batch.
  std::vector<float> score_factor;
  float score_factor_at(int layer) const {
    return score_factor.empty() ? 1.0f : score_factor[static_cast<std::size_t>(layer)];
  }
  // Layers (1 = on, size = layers; empty = none) whose keys are rotated and
  // cached per query head rather than per KV head, so that a hook may give
  // the heads of one GQA group different scales in the prefill
  // (ForwardHooks::head_rope_scales, Ms-PoE). A layer whose scales already
  // differ inside a group gets per-head key slots anyway.
  std::vector<std::uint8_t> per_head_key_slots;
  // The remapped attention (off: none) in the layers marked 1 in
  // remapped_layers (size = layers; empty = every layer). Such a layer runs
  // its attention per sequence and reads out no attention rows or key-0
  // weights (Ms-PoE and SIW do not combine with it).
  DistanceRemap distance_remap;
  std::vector<std::uint8_t> remapped_layers;
  bool remaps(int layer) const {
    return distance_remap.on() && (remapped_layers.empty() || remapped_layers[static_cast<std::size_t>(layer)] != 0);
  }
  static SequenceScales ones(int layers, int heads);
  float at(int layer, int head) const { return scale[static_cast<std::size_t>(layer) * heads + head]; }
  bool all_ones() const;
  // Throws std::invalid_argument ("<who>: ...") unless the scales fit the model.
  void check(const ModelConfig& config, const char* who) const;
  // Key slots of `layer`: one per KV head where every head of a GQA group
  // shares its scale and per-head slots are not asked for, else one per query head.
  int key_slots(int layer, int kv_heads) const;
};

// PHS in one layer: channel `channel` of the normed input to Q and K scaled
// by `scale`; q_column / k_column are that column of W_Q (heads x head_dim)
// and W_K (kv_heads x head_dim).
struct QkChannelScaling {
  int channel = 0;
  double scale = 1.0;
  std::vector<float> q_column;
  std::vector<float> k_column;
};

// Optional per-call hooks, named by the mechanism they act through and the
// stage of the layer where they run (all off by default; built from an
// Intervention by backends/engine/engine_hooks.hpp). Float positions
// are Model::forward's `positions` argument, per-head key slots a Sequence
// option.
struct ForwardHooks {
  // Run the whole call as one chunk: hooks that read the last query's row
  // need it over every prompt key in each layer.
  bool whole_prompt = false;

  // Stage: before RoPE, in a call on an empty sequence (the prefill), with
  // the last query's softmax rows before RoPE (after the per-head Q/K norm
  // where the architecture has one; heads x tokens, computed by the model:
  // ops/last_query_rows.hpp). A non-empty result is this layer's
  // per-head RoPE scales, fixed for the sequence's life; heads of one GQA
  // group may differ only in layers with per-head key slots (Ms-PoE Alg. 1).
  std::function<std::vector<float>(int layer, std::span<const float> rows, int tokens)> head_rope_scales;
  // The layers (1 = call it, size = layers) where head_rope_scales is called;
  // the rows are computed only there. Empty = every layer.
  std::vector<std::uint8_t> head_rope_scale_layers;

  // Stage: after the attention kernel. The last query's softmax rows (heads x
  // keys, before any key-0 correction) in the layers marked 1 here (size =
  // layers), with the first position index and the call's token count (SIW
  // density; Ms-PoE-style awareness).
  std::vector<std::uint8_t> last_query_row_layers;
  std::function<void(int layer, std::span<const float> rows, int keys, int start, int tokens)> last_query_row;

  // Stage: after the attention kernel (and the readout above). Per token of
  // the call, a factor alpha on key 0's post-softmax weight p0 without
  // renormalising, applied outside the kernel: out += (alpha - 1) p0 v0
  // (SIW). Empty = none in this layer.
  std::function<std::vector<float>(int layer, int start, int tokens)> key0_weight_factors;

  // Stage: the layer's Q and K rows. Where it returns a scaling for the
  // layer, channel c of the normed input to Q and K is scaled by s: every
  // K row and the Q rows from `first_query` on get (s - 1) x_c times the
  // weight column (linear, so the scaled rows are K + (s - 1) x_c W_K[:, c]
  // and Q + (s - 1) x_c W_Q[:, c]) (PHS eq. 2-3). `first_query` is the
  // prompt's last row in the prefill (the first call): there the plain
  // attention runs first (every other row keeps it, and the readouts above
  // read it), then the keys are re-cached from the changed rows and the
  // last row attended again. In every later call `first_query` is 0 (each
  // later token is a decode step's last token, so a call feeding
  // teacher-forced gold tokens equals one decode step per token) and the
  // rows are scaled before the layer's one attention. Data rather than a
  // callback, so that every device applies it where the rows live; asked
  // once per layer and call (a layer it scales runs its attention per
  // sequence).
  std::function<const QkChannelScaling*(int layer)> qk_channel_scaling;

  // Stage: layer output. The residual stream rows of the call (tokens x
  // hidden) after each layer; `start` is the sequence index of the first row
  // (a long prompt arrives in prefill_chunk pieces). The PHS channel search
  // (ga-run phs-search) taps it.
  std::function<void(int layer, int start, std::span<const float> residual, int tokens)> on_layer_output;
};

class Model;

// One sequence's state: its KV cache on the model's device and its fixed
// RoPE scales (an Ms-PoE hook sets its layers' scales in the prefill).
class Sequence {
 public:
  Sequence(const Model& model, int capacity, SequenceScales scales);
  int length() const { return length_; }
  int capacity() const { return capacity_; }
  const SequenceScales& scales() const { return scales_; }
  double last_position() const { return positions_.empty() ? -1.0 : positions_.back(); }
  // Forgets every token after the first `length` (their cache entries are
  // overwritten by the next forward): how a batch reuses a shared prompt prefix.
  void truncate(int length);
  // Bytes of device memory a sequence of `capacity` takes on `device` (in
  // the cache form it makes now; without per-head slots).
  static std::size_t cache_bytes(const ModelConfig& config, const Device& device, int capacity);

 private:
  friend class Model;
  const Model* model_ = nullptr;
  int capacity_ = 0;
  int length_ = 0;
  SequenceScales scales_;
  std::vector<double> positions_;
  std::vector<std::unique_ptr<LayerKv>> layers_;
  // The far keys of a remapped attention that moves them (DistanceRemap::
  // moves_keys), rotated at their far positions, with copies of the values
  // (the attention op reads keys and values from one cache); null elsewhere.
  std::vector<std::unique_ptr<LayerKv>> far_layers_;
};

// One sequence's part of a forward call.
struct SequenceCall {
  Sequence* sequence = nullptr;
  std::span<const std::int32_t> tokens;
  std::span<const double> positions;  // one per token; empty = continue from the last position + 1 (0 first)
  std::span<const int> logit_rows;    // indices into tokens whose logits are wanted
  const ForwardHooks* hooks = nullptr;
};

class Model {
 public:
  // Maps the GGUF, reads the architecture from its metadata and loads the
  // weights into the device's form. Throws GgufError / std::invalid_argument
  // naming the file and tensor on anything unsupported. The device outlives
  // the model.
  Model(const std::filesystem::path& path, Device& device);
  // On the CPU engine (devices/cpu/cpu_device.hpp). fp32_weights: every matrix
  // dequantised to F32 (backend.precision: fp32; ops/weight_matrix.hpp);
  // kv_form: the KV caches' element (backend.kv_cache).
  explicit Model(const std::filesystem::path& path, Isa isa = best_isa(), bool fp32_weights = false,
                 KvForm kv_form = KvForm::fp32);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  // The file's metadata and tensor table; of its bytes only the tensors the
  // method hooks read after load are kept (hooks::read_after_load).
  const GgufFile& file() const { return *file_; }
  // content_hash() of the bytes this model was loaded from.
  const std::string& content_hash() const { return content_hash_; }
  Device& device() const { return device_; }
  int vocab() const { return static_cast<int>(config_.vocab); }
  // Device memory the weights take, and what one token of activations takes
  // in a forward call (the batched backend sizes its batches with these).
  std::size_t weight_bytes() const { return weight_bytes_; }
  std::size_t activation_bytes_per_token() const;

  // Runs every call's tokens after what its sequence holds, all in one pass.
  // The logits of the requested rows, call after call, are left on the
  // device (logit_rows() x vocab). Throws std::invalid_argument for a token
  // outside the vocabulary, a full cache, bad rows or positions.
  void forward(std::span<const SequenceCall> calls);
  int logit_rows() const { return logit_rows_; }
  std::vector<float> download_logits() const;
  // Per logit row of the last forward: its argmax, and with `gold` (one token
  // per row) log softmax at the gold token.
  void score(std::span<const std::int32_t> gold, std::vector<std::int32_t>& argmax,
             std::vector<double>& gold_logprob);

  // One sequence: runs `tokens` after what `seq` already holds, in
  // prefill_chunk pieces (one piece where the hooks read the whole prompt).
  // positions: one per token, empty = continue from the last cached
  // position + 1 (0 for the first). Returns the logits of the rows listed in
  // `logit_rows` (indices into tokens), rows.size() x vocab, row-major.
  std::vector<float> forward(Sequence& seq, std::span<const std::int32_t> tokens,
                             std::span<const double> positions, std::span<const int> logit_rows,
                             const ForwardHooks* hooks = nullptr);

  // Tokens processed per pass through the layers in forward(Sequence&, ...)
  // (bounds activation memory).
  int prefill_chunk = 512;

  // The longest call (tokens) whose attention may join the layer's batched
  // step (Device::decode_attention); longer calls, prefills, take the
  // per-sequence ops (a GPU answers those with its prefill attention). 0:
  // every sequence per sequence (the path before batching, for comparison).
  int decode_batch_tokens = 16;

  // Times every device op of later calls into `profile` (op_profile.hpp;
  // null: none, the default). The profile outlives the calls.
  void set_op_profile(OpProfile* profile) { profile_ = profile; }

 private:
  friend class Sequence;
  struct Layer {
    DeviceBuffer<float> attn_norm, ffn_norm, qkv_bias;  // qkv_bias empty: none
    DeviceBuffer<float> q_norm, k_norm;                 // per-head Q/K norm weights (empty: none)
    DeviceBuffer<float> attn_post_norm, ffn_post_norm;  // norms of the blocks' outputs (empty: none)
    // MPT's biases (empty: none): the LayerNorms', the output projection's, the FFN's.
    DeviceBuffer<float> attn_norm_bias, ffn_norm_bias, attn_out_bias, up_bias, down_bias;
    std::unique_ptr<DeviceMatrix> qkv;       // rows: Q (heads*head_dim), K, V (kv_heads*head_dim each)
    std::unique_ptr<DeviceMatrix> attn_out;
    std::unique_ptr<DeviceMatrix> gate_up;   // rows: gate (ffn), up (ffn); ungated FFN (mpt): up alone
    std::unique_ptr<DeviceMatrix> down;
  };
  struct Workspace;
  void load();
  // device_scales: the sequence's RoPE scales of this layer on the device (heads floats).
  // channel_scaling: the sequence's qk_channel_scaling in this layer (null: none).
  void attend_sequence(int layer, const SequenceCall& call, int offset, float* device_scales,
                       const QkChannelScaling* channel_scaling);
  void attend_remapped(int layer, Sequence& seq, int offset, int tokens, int first);
  void prepare_far_half(int layer, Sequence& seq, int offset, int tokens, int first, const float* qkv,
                        const float* device_scales, int tables, const double* inv_freq);
  void upload_far_positions(std::span<const SequenceCall> calls, const std::vector<int>& offsets,
                            const std::vector<double>& positions);
  bool joins_decode_batch(int layer, const SequenceCall& call, const QkChannelScaling* channel_scaling) const;
  static bool sets_head_scales(int layer, const SequenceCall& call);
  static bool reads_last_row(int layer, const ForwardHooks* hooks);
  const float* rope_table(int offset, int tokens, float scale, const float* device_scale, const double* inv_freq);
  void apply_head_rope_scales(int layer, Sequence& seq, const float* qkv, int tokens, float* device_scales,
                              const ForwardHooks& hooks);
  void add_block_output(const DeviceBuffer<float>& post_norm, const float* out, int tokens);
  void add_bias(float* x, int rows, const DeviceBuffer<float>& bias);
  // The architecture's norm (RMSNorm, or LayerNorm with an optional bias) of `rows` rows of hidden.
  void norm_rows(const float* x, const DeviceBuffer<float>& weight, const DeviceBuffer<float>& bias, int rows,
                 float* y);
  void feed_forward(int layer, int tokens);
  void project_qkv(int layer, const float* normed, int tokens, float* qkv);
  // What follows the projection and is not linear in it: the clamp, the per-head Q/K norm.
  void finish_qkv(int layer, float* qkv, int tokens);
  void norm_qk(int layer, float* qkv, int tokens);
  void scale_qk_channel(int layer, const QkChannelScaling& scaling, float* qkv, const float* normed, int tokens,
                        int first_query);
  void cache_keys(int layer, Sequence& seq, const float* qkv, int tokens, const float* tables,
                  std::size_t table_stride);
  void rotate_queries(float* rotated, int offset, int tokens, int first, const float* qkv, const float* tables,
                      std::size_t table_stride);
  void attend(int layer, Sequence& seq, int offset, int tokens, int first, bool key0, bool last_row);
  void correct_key0(int layer, Sequence& seq, int offset, int tokens, int first);
  // Runs one op (a Device op or an op over rows), timed where a profile is set.
  template <typename Op, typename... Args>
  void run_op(const char* name, Op op, Args&&... args) const;

  std::unique_ptr<Device> owned_device_;  // declared first: destroyed after every buffer on it
  Device& device_;
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  std::size_t weight_bytes_ = 0;
  std::string content_hash_;
  std::unique_ptr<DeviceEmbedding> embedding_;
  DeviceBuffer<float> output_norm_, output_norm_bias_;  // bias: LayerNorm's (empty: none)
  std::unique_ptr<DeviceMatrix> lm_head_;
  DeviceBuffer<double> rope_inv_freq_;
  DeviceBuffer<double> rope_inv_freq_local_;  // the local layers' (empty: none)
  std::vector<Layer> layers_;
  std::unique_ptr<Workspace> ws_;
  int logit_rows_ = 0;
  OpProfile* profile_ = nullptr;
};

}  // namespace midtune::engine
