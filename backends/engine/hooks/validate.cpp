#include "backends/engine/hooks/validate.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "backends/engine/hooks/mspoe_order.hpp"
#include "backends/engine/hooks/position_map.hpp"
#include "backends/engine/hooks/siw_density.hpp"

namespace midtune::engine::hooks {
namespace {

[[noreturn]] void bad(const std::string& field, const std::string& reason) {
  throw std::invalid_argument("intervention." + field + ": " + reason);
}

// The part-validators name fields relative to their section; prefix them.
template <typename F>
void with_prefix(F&& check) {
  try {
    check();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("intervention.") + e.what());
  }
}

}  // namespace

void validate_hidden_channel(const HiddenChannel& phs, const ModelShape& model) {
  if (phs.channel < 0 || phs.channel >= model.hidden) {
    bad("hidden_channel.channel", std::to_string(phs.channel) + " is outside the hidden size " +
                                      std::to_string(model.hidden) + " (channels 0.." +
                                      std::to_string(model.hidden - 1) + ")");
  }
  if (!std::isfinite(phs.scale)) bad("hidden_channel.scale", "must be finite");
  if (phs.layers.empty()) bad("hidden_channel.layers", "must name at least one layer");
  for (int l : phs.layers) {
    if (l < 0 || l >= model.layers) {
      bad("hidden_channel.layers", "layer " + std::to_string(l) + " is outside the model's layers 0.." +
                                       std::to_string(model.layers - 1));
    }
  }
}

void validate_intervention(const Intervention& iv, const ModelShape& model) {
  if (!iv.rope_scale.empty()) {
    if (iv.rope_scale.size() != 1 && static_cast<int>(iv.rope_scale.size()) != model.layers) {
      bad("rope_scale", std::to_string(iv.rope_scale.size()) + " rows for a model with " +
                            std::to_string(model.layers) + " layers (give 1 or one per layer)");
    }
    for (std::size_t l = 0; l < iv.rope_scale.size(); ++l) {
      const auto& row = iv.rope_scale[l];
      if (row.size() != 1 && static_cast<int>(row.size()) != model.heads) {
        bad("rope_scale[" + std::to_string(l) + "]", std::to_string(row.size()) + " values for " +
                                                          std::to_string(model.heads) + " heads (give 1 or one per head)");
      }
      for (double s : row) {
        if (!std::isfinite(s) || s <= 0) bad("rope_scale[" + std::to_string(l) + "]", "scales must be finite and > 0");
      }
    }
  }
  if (iv.mspoe) with_prefix([&] { validate_mspoe(*iv.mspoe, model.layers); });
  if (iv.position_map) with_prefix([&] { validate_position_map(*iv.position_map); });
  if (iv.siw) with_prefix([&] { validate_siw(*iv.siw, model.layers); });
  if (iv.hidden_channel) validate_hidden_channel(*iv.hidden_channel, model);
}

}  // namespace midtune::engine::hooks
