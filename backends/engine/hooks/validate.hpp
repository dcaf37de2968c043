// Model-aware validation of an Intervention before the engine runs it:
// every rejected parameter gets a message naming the field and the reason
// (non-increasing CALIOPE Phi, min_ratio > max_ratio, a PHS channel >= the
// hidden size, a layer outside the model, ...).
#pragma once

#include "backends/intervention.hpp"

namespace midtune::engine::hooks {

struct ModelShape {
  int layers = 0;
  int heads = 0;
  int hidden = 0;
};

// Throws std::invalid_argument ("intervention.hidden_channel.channel: ...").
void validate_hidden_channel(const HiddenChannel& phs, const ModelShape& model);
void validate_intervention(const Intervention& intervention, const ModelShape& model);

}  // namespace midtune::engine::hooks
