// An Intervention turned into what Model::forward takes:
// the Sequence's RoPE scales, the prompt's positions and the ForwardHooks.
//   Ms-PoE  per-head scales from first_layer on, assigned in the prefill call
//           from the last query's Q.K before RoPE (ForwardHooks::
//           head_rope_scales, mspoe_order.hpp); the Sequence keeps a key slot
//           per query head there (SequenceScales::per_head_key_slots), so GQA
//           keys are rotated per head.
//   CALIOPE prompt positions Phi(t) (position_map.hpp); later calls continue
//           from the last remapped position + 1 (Model::forward's default).
//   SIW     factors on key 0's weight per query token in the chosen layers
//           (ForwardHooks::key0_weight_factors), dense chunks found from the
//           prefill's last row (last_query_row; siw_density.hpp).
//   PHS     channel c of the normed input to Q and K scaled by s in the
//           chosen layers; the call's keys are re-cached scaled and the last
//           token's row recomputed (PHS eq. 2-3; every row of a later call,
//           ForwardHooks::qk_channel_scaling).
// Ms-PoE overrides rope_scale in its layers; the others compose freely.
// The first forward call must hold the whole prompt (prompt_tokens tokens)
// and nothing else: "the last query" is the prompt's last token.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/engine/hooks/siw_density.hpp"
#include "backends/engine/hooks/token_span.hpp"
#include "backends/engine/hooks/validate.hpp"
#include "backends/engine/model.hpp"
#include "methods/intervention.hpp"

namespace midtune::engine::hooks {

ModelShape shape_of(const Model& model);
ModelShape shape_of(const ModelConfig& config);

// What a sequence of `intervention` fixes for its life, before any pass:
// the RoPE scale of every (layer, head) (LPES, PI), the attention
// logits' factor of every layer (an attention temperature t: 1 / t) and
// the distance remap of SelfExtend or STRING. Assumes a validated
// intervention.
SequenceScales sequence_scales(const ModelConfig& config, const Intervention& intervention);

// True for the tensors an intervention reads from the model file after the
// model has loaded (PHS takes one column of each layer's Q and K matrices,
// for the channel a candidate picks); the model keeps their bytes and frees
// the rest.
bool read_after_load(const std::string& tensor_name);

class EngineIntervention {
 public:
  // Validates against the model and the prompt; throws std::invalid_argument
  // naming the field and the reason.
  EngineIntervention(const Model& model, const Intervention& intervention, int prompt_tokens,
                     std::vector<TokenSpan> chunks);
  // The same for any device's model: its metadata and file (PHS reads
  // weight columns from it).
  EngineIntervention(const ModelConfig& config, const GgufFile& file, const Intervention& intervention,
                     int prompt_tokens, std::vector<TokenSpan> chunks);
  EngineIntervention(const EngineIntervention&) = delete;  // the hooks point into this object
  EngineIntervention& operator=(const EngineIntervention&) = delete;

  const SequenceScales& sequence_scales() const { return scales_; }
  // Positions of the prompt's tokens; empty = plain 0..n-1.
  const std::vector<double>& prompt_positions() const { return positions_; }
  // nullptr when the Intervention needs no hook (plain path untouched).
  const ForwardHooks* hooks() const { return any_hook_ ? &hooks_ : nullptr; }

  // What the prefill decided, for tests and logs.
  const std::map<int, std::vector<float>>& mspoe_scales() const { return mspoe_scales_; }
  // Ms-PoE eq. 1 awareness score per head (whatever the order used).
  const std::map<int, std::vector<double>>& mspoe_awareness() const { return mspoe_awareness_; }
  const std::map<int, DenseChunks>& siw_dense() const { return siw_dense_; }

 private:
  std::vector<float> assign_mspoe(int layer, std::span<const float> rows, int tokens);
  void read_siw_density(int layer, std::span<const float> rows, int keys, int start, int tokens);
  std::vector<float> siw_factors(int layer, int start, int tokens) const;

  ModelConfig config_;
  Intervention intervention_;
  int prompt_tokens_ = 0;
  std::vector<TokenSpan> chunks_;
  SequenceScales scales_;
  std::vector<double> positions_;
  ForwardHooks hooks_;
  bool any_hook_ = false;
  std::map<int, std::vector<float>> mspoe_scales_;
  std::map<int, std::vector<double>> mspoe_awareness_;
  std::map<int, DenseChunks> siw_dense_;
  // PHS per layer: column `channel` of W_Q (heads*head_dim) and W_K (kv_heads*head_dim).
  std::map<int, QkChannelScaling> phs_scaling_;
};

}  // namespace midtune::engine::hooks
