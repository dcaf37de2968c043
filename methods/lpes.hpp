// LPES (docs/methods.md "LPES", paper 000): one RoPE scale per layer, every head of
// layer h using s_h. This module owns the Intervention's `rope_scale` field,
// which PI (methods/pi.hpp) shares: its JSON, its broadcast rules, its
// validation against the model and its expansion to one scale per
// (layer, head). The searched Bézier genome lives in core/ga/lpes_space.hpp
// (it is not a gene table), so LPES has no gene schema and no paper default:
// the paper's knobs are the search itself.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune {

struct MethodModule;

// rope_scale[layer][head]: the RoPE position index is divided by this factor.
// Empty = no scaling. One row applies to every layer; a row with one value
// applies to every head of its layer. Otherwise one row per layer and one
// value per head.
using RopeScale = std::vector<std::vector<double>>;

// The scale of (layer, head) under the broadcast rules above.
double rope_scale_at(const RopeScale& rope_scale, int layer, int head);
// Every (layer, head) scale, layer-major (layers x heads), as the engine reads them.
std::vector<float> rope_scales_per_head(const RopeScale& rope_scale, int layers, int heads);

nlohmann::json rope_scale_to_json(const RopeScale& rope_scale);
// Throws std::invalid_argument "intervention.rope_scale[...]: ..." for a bad list.
RopeScale rope_scale_from_json(const nlohmann::json& j);
// Row and value counts fit the model, scales finite and in
// [method_checks::kMinScale, kMaxScale].
void validate_rope_scale(const RopeScale& rope_scale, const ModelShape& model);

// LPES decode (eqs. 5-6): the sampled per-layer scales as rows of one value.
RopeScale rope_scale_per_layer(const std::vector<double>& layer_scales);

const MethodModule& lpes_method();

}  // namespace midtune
