// The engine's forward pass for whole evaluation batches on one device
// (device_ops.hpp: a GPU through CudaOps, or the host reference). The same
// architecture metadata, RoPE arithmetic and method hooks as the CPU model
// (model.hpp), arranged for a device that wants few, large operations:
//
//   the new tokens of every sequence in a call are packed into one token
//   matrix (variable lengths, no padding) for embedding, RMSNorm, the
//   projections (bf16 weights, dequantised once at load, fp32 sums) and the
//   feed-forward block; RoPE, the KV cache and attention run per sequence;
//   logits are computed only for the rows asked for and stay on the device,
//   where score() reduces each row to its argmax and a gold log-probability.
//
// KV cache: per sequence and layer, keys (already rotated) and values in
// fp32, row-major [position][slot x head_dim]. A slot is a KV head, or a
// query head in layers whose heads of one GQA group have different RoPE
// scales (Ms-PoE): there the group's keys are rotated per head and the
// values repeated per head, as the CPU model's per-head key slots do.
//
// Hooks (ForwardHooks, from hooks::EngineIntervention) run as on the CPU:
// per sequence, with the few rows they read copied to the host (the last
// query's rows, heads x keys) and the few values they return copied back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "backends/engine/batched/device_ops.hpp"
#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/model.hpp"

namespace midtune::engine::batched {

class BatchedModel;

// One sequence's device KV cache and its RoPE scales (fixed for its life,
// except that an Ms-PoE hook sets its layers' scales in the prefill).
class BatchedSequence {
 public:
  BatchedSequence(BatchedModel& model, int capacity, RopeScales scales);
  int length() const { return length_; }
  int capacity() const { return capacity_; }
  const RopeScales& scales() const { return scales_; }
  // Bytes of device memory a sequence of `capacity` takes (without per-head slots).
  static std::size_t cache_bytes(const ModelConfig& config, int capacity);

 private:
  friend class BatchedModel;
  struct LayerCache {
    int slots = 0;                // KV heads, or query heads (per-head slots)
    DeviceBuffer<float> keys;     // [capacity][slots * head_dim], rotated
    DeviceBuffer<float> values;   // [capacity][slots * head_dim]
  };
  int capacity_ = 0;
  int length_ = 0;
  RopeScales scales_;
  std::vector<double> positions_;
  std::vector<LayerCache> layers_;
};

// One sequence's part of a forward call.
struct SequenceCall {
  BatchedSequence* sequence = nullptr;
  std::span<const std::int32_t> tokens;
  std::span<const double> positions;  // one per token; empty = continue from the last position + 1 (0 first)
  std::span<const int> logit_rows;    // indices into tokens whose logits are wanted
  const ForwardHooks* hooks = nullptr;  // on_layer_output is CPU-only and refused here
};

class BatchedModel {
 public:
  // Reads the GGUF (the checks of the CPU model), dequantises every matrix
  // to bf16 and uploads it; embeddings stay fp32 (exact rows, as the CPU
  // embeds them). Throws std::invalid_argument / GgufError naming the file.
  BatchedModel(const std::filesystem::path& path, DeviceOps& device);
  ~BatchedModel();
  BatchedModel(const BatchedModel&) = delete;
  BatchedModel& operator=(const BatchedModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  DeviceOps& device() const { return device_; }
  int vocab() const { return static_cast<int>(config_.vocab); }
  // Device memory the weights take, and what one token of activations takes
  // in a forward call (the backend sizes its batches with these).
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

 private:
  friend class BatchedSequence;
  struct Layer {
    DeviceBuffer<float> attn_norm, ffn_norm, qkv_bias;  // qkv_bias empty: none
    DeviceBuffer<std::uint16_t> qkv, attn_out, gate, up, down;  // bf16, [outputs][inputs]
  };
  struct Workspace;
  // device_scales: the sequence's RoPE scales of this layer on the device (heads floats).
  void attend_sequence(int layer, const SequenceCall& call, int offset, float* device_scales);
  void cache_keys(int layer, BatchedSequence& seq, const float* qkv, int tokens, const float* tables,
                  std::size_t table_stride) const;
  void cache_values(int layer, BatchedSequence& seq, const float* qkv, int tokens) const;
  void rotate_queries(int offset, int tokens, int first, const float* qkv, const float* tables,
                      std::size_t table_stride);
  void attend(int layer, BatchedSequence& seq, int offset, int tokens, int first, bool key0, bool last_row);
  void correct_key0(int layer, BatchedSequence& seq, int offset, int tokens, int first);

  DeviceOps& device_;
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  std::size_t weight_bytes_ = 0;
  DeviceBuffer<float> embedding_;  // vocab x hidden, fp32
  DeviceBuffer<float> output_norm_;
  DeviceBuffer<std::uint16_t> lm_head_;  // vocab x hidden, bf16
  DeviceBuffer<double> rope_inv_freq_;
  std::vector<Layer> layers_;
  std::unique_ptr<Workspace> ws_;
  int logit_rows_ = 0;
};

}  // namespace midtune::engine::batched
