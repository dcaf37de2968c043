// The Llama forward pass, read top to bottom like llama2.c's
// run.c: embedding (x embedding_scale) -> per layer [RMSNorm -> QKV (+ bias)
// -> RoPE -> causal GQA attention (within the sliding window, if any) ->
// output projection -> residual -> RMSNorm -> SwiGLU or GeGLU FFN ->
// residual] -> final RMSNorm -> tied or separate output matrix. What an
// architecture changes (llama, qwen2, gemma) is in ModelConfig
// (backends/engine/gguf/gguf.hpp) and the few lines that read it.
//
// Positions are floats (CALIOPE remaps them) and every (layer, head) has its
// own RoPE scale (PI / LPES / Ms-PoE divide the position by it), on top of
// the model's own frequencies:
//   angle_i = (pos / scale[layer][head]) * base^(-2i / rope_dims) * freq_scale / freq_factor[i]
// (freq_factor: Llama-3.1's rope_freqs.weight, else 1; freq_scale: linear
// RoPE scaling, else 1).
//
// KV cache choice: keys are cached already rotated, transposed per "key
// slot". In a layer where every head of a GQA group shares one scale (the
// plain model, PI, LPES) there is one slot per KV head; where the scales
// differ inside a group, or the Sequence asks for it
// (RopeScales::per_head_key_slots, Ms-PoE), each query head gets its own
// slot, its keys rotated at that head's scale, so each query head sees keys
// rotated like itself. Scales are fixed for the life of a Sequence (Ms-PoE
// fixes them at prefill), so cached keys never need re-rotation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/ops/aligned_buffer.hpp"
#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/quantize_rows.hpp"
#include "backends/engine/ops/weight_matrix.hpp"

namespace midtune::engine {

struct LayerWeights {
  std::vector<float> attn_norm;
  std::vector<float> ffn_norm;
  WeightMatrix qkv;      // rows: Q (heads*head_dim), K, V (kv_heads*head_dim each)
  std::vector<float> qkv_bias;  // over the Q|K|V rows (qwen2); empty = none
  WeightMatrix attn_out;
  WeightMatrix gate_up;  // rows: gate (ffn), up (ffn)
  WeightMatrix down;
};

// How a Sequence rotates its keys, fixed for its life: scale[layer * heads +
// head], every entry finite and > 0.
struct RopeScales {
  int layers = 0;
  int heads = 0;
  std::vector<float> scale;
  // Layers (1 = on, size = layers; empty = none) whose keys are rotated and
  // cached per query head rather than per KV head, so that a hook may give
  // the heads of one GQA group different scales in the prefill
  // (ForwardHooks::head_rope_scales, Ms-PoE). A layer whose scales already
  // differ inside a group gets per-head key slots anyway.
  std::vector<std::uint8_t> per_head_key_slots;
  static RopeScales ones(int layers, int heads);
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
  // the last query's softmax rows before RoPE (heads x tokens, computed by
  // the model: ops/last_query_rows.hpp). A non-empty result is this layer's
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

  // Stage: after the layer's attention. Where it returns a scaling for the
  // layer, channel c of the normed input to Q and K is scaled by s: every
  // K row and the Q rows from `first_query` on get (s - 1) x_c times the
  // weight column (linear, so the scaled rows are K + (s - 1) x_c W_K[:, c]
  // and Q + (s - 1) x_c W_Q[:, c]); the call's keys are re-cached from the
  // changed rows and the rows from `first_query` on recomputed (PHS eq. 2-3).
  // `first_query` is the prompt's last row in the prefill (the first call)
  // and 0 in every later call: each later token is a decode step's last
  // token, so a call feeding teacher-forced gold tokens equals one decode
  // step per token. Data rather than a callback, so that every device
  // applies it where the rows live.
  std::function<const QkChannelScaling*(int layer)> qk_channel_scaling;

  // Stage: layer output. The residual stream rows of the call (tokens x
  // hidden) after each layer; `start` is the sequence index of the first row
  // (a long prompt arrives in prefill_chunk pieces). The PHS channel search
  // (ga-run phs-search) taps it.
  std::function<void(int layer, int start, std::span<const float> residual, int tokens)> on_layer_output;
};

class Model;

// One sequence's state: the KV cache and its fixed RoPE scales.
class Sequence {
 public:
  Sequence(const Model& model, int capacity, RopeScales scales);
  int length() const { return length_; }
  int capacity() const { return capacity_; }
  // Capacity rounded up to whole 16-key blocks (the key cache layout).
  std::size_t key_capacity() const { return (static_cast<std::size_t>(capacity_) + 15) / 16 * 16; }
  const RopeScales& scales() const { return scales_; }
  double last_position() const { return positions_.empty() ? -1.0 : positions_.back(); }
  // Forgets every token after the first `length` (their cache entries are
  // overwritten by the next forward): how a batch reuses a shared prompt prefix.
  void truncate(int length);

 private:
  friend class Model;
  struct LayerCache {
    int key_slots = 0;
    std::vector<int> slot_of_head;  // query head -> key slot
    std::vector<float> slot_scale;  // RoPE scale of each slot
    AlignedBuffer<float> kt;        // [slot][key_capacity/16][head_dim][16], rotated keys
    AlignedBuffer<float> v;         // [kv_head][capacity][head_dim]
  };
  int capacity_ = 0;
  int length_ = 0;
  RopeScales scales_;
  std::vector<double> positions_;
  std::vector<LayerCache> layers_;
};

class Model {
 public:
  // Maps the GGUF, reads the architecture from its metadata and repacks the
  // weights. Throws GgufError / std::invalid_argument naming the file and
  // tensor on anything unsupported.
  // fp32_weights: every matrix dequantised to F32 (backend.precision: fp32;
  // weight_matrix.hpp).
  explicit Model(const std::filesystem::path& path, Isa isa = best_isa(), bool fp32_weights = false);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  Isa isa() const { return isa_; }
  int vocab() const { return static_cast<int>(config_.vocab); }

  // Runs `tokens` after what `seq` already holds. positions: one per token,
  // empty = continue from the last cached position + 1 (0 for the first).
  // Returns logits for the rows listed in `logit_rows` (indices into tokens),
  // rows.size() x vocab, row-major. Throws std::invalid_argument for a token
  // id outside the vocabulary, a full cache or bad rows.
  std::vector<float> forward(Sequence& seq, std::span<const std::int32_t> tokens,
                             std::span<const double> positions, std::span<const int> logit_rows,
                             const ForwardHooks* hooks = nullptr) const;

  // Tokens processed per pass through the layers (bounds activation memory).
  int prefill_chunk = 512;

 private:
  struct Workspace;
  void forward_chunk(Sequence& seq, std::span<const std::int32_t> tokens, const double* positions,
                     std::span<const int> logit_rows, float* logits, const ForwardHooks* hooks,
                     Workspace& ws) const;
  void attention_layer(int layer, Sequence& seq, int tokens, const double* positions,
                       Workspace& ws, const ForwardHooks* hooks) const;
  void embed(std::int32_t token, float* out) const;
  // Pieces of attention_layer, shared with the PHS recompute.
  void cache_keys(int layer, Sequence& seq, int tokens, Workspace& ws) const;
  void rotate_queries(int layer, const Sequence& seq, int tokens, int first, Workspace& ws) const;
  void attend(int layer, Sequence& seq, int tokens, int first, bool want_key0_weights, bool want_last_row,
              Workspace& ws) const;
  void correct_key0_weight(int layer, const Sequence& seq, int tokens, int first, Workspace& ws) const;
  void apply_head_rope_scales(int layer, Sequence& seq, int tokens, const double* positions, Workspace& ws,
                              const ForwardHooks& hooks) const;
  void scale_qk_channel(const QkChannelScaling& phs, int tokens, int first_query, Workspace& ws) const;
  void recompute_last_rows(int layer, Sequence& seq, int tokens, int first, Workspace& ws) const;

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  Isa isa_;
  GgmlType embedding_type_{};
  const std::byte* embedding_data_ = nullptr;
  std::size_t embedding_row_bytes_ = 0;
  std::vector<LayerWeights> layers_;
  std::vector<float> output_norm_;
  std::vector<double> rope_inv_freq_;  // per dimension pair: base^(-2i/d) * freq_scale / freq_factor[i]
  WeightMatrix lm_head_;
};

}  // namespace midtune::engine
