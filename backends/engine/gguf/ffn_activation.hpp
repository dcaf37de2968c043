// The feed-forward block's gate activation: SwiGLU silu(gate) * up (llama,
// qwen2) or GeGLU gelu(gate) * up with gelu's tanh approximation (gemma);
// without a gate (mpt) the activation of the up projection alone. Its own
// header because the CUDA bodies (C++17) take it without the rest of
// gguf.hpp.
#pragma once

#include <cstdint>

namespace midtune {

enum class FfnActivation : std::uint8_t { silu, gelu_tanh };

}  // namespace midtune
