// The Intervention: the one contract between objectives and backends
// (docs/design.md, "Data flow"). A plain, JSON-serialisable description of what the
// model does differently. Objectives never see a model; backends never see a
// genome. Every field is optional; an empty Intervention is the plain model.
// Its JSON, and its validation against a model, go field by field through the
// method registry (methods/registry.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

// Each method's parameter struct lives in its module (methods/<method>.hpp).
#include "methods/caliope.hpp"  // PositionMap
#include "methods/lpes.hpp"     // rope_scale (LPES, PI)
#include "methods/mspoe.hpp"    // MsPoe
#include "methods/phs.hpp"      // HiddenChannel
#include "methods/siw.hpp"      // Siw
#include "methods/self_extend.hpp"   // SelfExtend
#include "methods/string_shift.hpp"  // StringShift
#include "methods/temperature.hpp"   // AttentionTemperature

namespace midtune {

struct Intervention {
  // rope_scale[layer][head]: the RoPE position index is divided by this
  // factor; broadcast rules in methods/lpes.hpp (RopeScale).
  std::vector<std::vector<double>> rope_scale;
  std::optional<MsPoe> mspoe;
  std::optional<PositionMap> position_map;
  std::optional<Siw> siw;
  std::optional<HiddenChannel> hidden_channel;
  std::optional<AttentionTemperature> attention_temperature;
  std::optional<SelfExtend> self_extend;
  std::optional<StringShift> string_shift;

  bool empty() const {
    return rope_scale.empty() && !mspoe && !position_map && !siw && !hidden_channel && !attention_temperature &&
           !self_extend && !string_shift;
  }
  // RoPE scale for (layer, head), resolving the broadcast rules.
  double scale_for(int layer, int head) const { return rope_scale_at(rope_scale, layer, head); }

  nlohmann::json to_json() const;
  // Throws std::invalid_argument naming the field and the reason.
  static Intervention from_json(const nlohmann::json& j);
  // Canonical text (sorted keys, fixed float formatting): two Interventions
  // that act the same have the same canonical text. Used as the cache key.
  std::string canonical() const;
  bool operator==(const Intervention&) const = default;
};

// 64-bit FNV-1a of a string, printed as 16 hex digits. Used to name cache
// keys compactly; the full canonical text is stored beside it, so a
// collision can never reuse a wrong evaluation.
std::string fnv1a_hex(const std::string& text);

}  // namespace midtune
