// How RoPE pairs a head's dimensions (llama.cpp's rope type of the
// architecture): ggml NORM rotates adjacent pairs (x[2i], x[2i+1]) (llama:
// its converter permuted Q/K for that), ggml NEOX rotates the halves
// (x[i], x[i + rope_dims/2]) (qwen2, gemma). Its own header because the CUDA
// bodies (C++17) take it without the rest of gguf.hpp.
#pragma once

#include <cstdint>

namespace midtune {

enum class RopePairing : std::uint8_t { adjacent, halves };

}  // namespace midtune
