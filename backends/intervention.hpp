// The Intervention: the one contract between objectives and backends
// (DESIGN.md, "Data flow"). A plain, JSON-serialisable description of what the
// model does differently. Objectives never see a model; backends never see a
// genome. Every field is optional; an empty Intervention is the plain model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace midtune {

// Ms-PoE (METHODS.md "Ms-PoE"): per-head RoPE ratios assigned at prefill.
struct MsPoe {
  double min_ratio = 1.2;
  double max_ratio = 1.8;
  int first_layer = 2;
  double alpha = 3.0;
  // awareness (paper's rank, default) | reference-argsort | sequential | random | entropy
  std::string order = "awareness";
  // The paper spaces ratios min + (i-1)(max-min)/(H-1); the reference code
  // uses min + (max-min)k/H. false = paper.
  bool reference_spacing = false;
  std::uint64_t seed = 0;  // for order == random
  bool operator==(const MsPoe&) const = default;
};

// CALIOPE (METHODS.md "CALIOPE"): position ids remapped chunk by chunk.
struct PositionMap {
  std::string kind;  // moses | hourglass | decay
  double gap = 10000.0;        // moses: Delta_gap
  double delta_min = 5.0;      // hourglass
  double delta_max = 1000.0;   // hourglass
  double delta0 = 1000.0;      // decay
  double lambda = 0.95;        // decay
  bool operator==(const PositionMap&) const = default;
};

// SIW (METHODS.md "SIW"): scale post-softmax attention to the initial token.
struct Siw {
  double alpha_dense = 1.0;
  double alpha_sparse = 1.0;
  double sigma = 1.0;
  std::vector<int> layers;  // layer indices where SIW applies
  bool operator==(const Siw&) const = default;
};

// PHS (METHODS.md "PHS"): scale one channel of the normed hidden state
// feeding Q and K, recompute the last token's attention row.
struct HiddenChannel {
  int channel = 0;
  double scale = 0.0;
  std::vector<int> layers;
  bool operator==(const HiddenChannel&) const = default;
};

struct Intervention {
  // rope_scale[layer][head]: the RoPE position index is divided by this
  // factor. An empty outer vector means no scaling. A row with one value
  // applies to every head of that layer (LPES); a single row with a single
  // value applies everywhere (PI). Otherwise row sizes equal the head count.
  std::vector<std::vector<double>> rope_scale;
  std::optional<MsPoe> mspoe;
  std::optional<PositionMap> position_map;
  std::optional<Siw> siw;
  std::optional<HiddenChannel> hidden_channel;

  bool empty() const {
    return rope_scale.empty() && !mspoe && !position_map && !siw && !hidden_channel;
  }
  // RoPE scale for (layer, head), resolving the broadcast rules above.
  double scale_for(int layer, int head) const;

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
