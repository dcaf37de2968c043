// Random ggml blocks of any type the engine reads, for tests and benchmarks
// that need quantised matrices without a quantiser: random quant bytes, and
// each block's fp16 scales (and mins) set to sane finite values so that the
// weights are of order 1 (random bytes there could be NaN or huge).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/fp16.hpp"

namespace midtune::testing {

// `rows` rows of `cols` elements of `type` (cols a multiple of its block size).
inline std::vector<std::uint8_t> random_blocks(GgmlType type, std::size_t rows, std::size_t cols,
                                               std::uint64_t seed) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (cols % info.block_elems != 0) {
    throw std::invalid_argument("random_blocks: " + std::to_string(cols) + " columns of " + info.name);
  }
  const std::size_t blocks = rows * cols / info.block_elems;
  std::vector<std::uint8_t> out(blocks * info.block_bytes);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.5f, 1.5f), value(-1.0f, 1.0f);
  const auto put16 = [&](std::size_t at, std::uint16_t bits) { std::memcpy(&out[at], &bits, 2); };
  if (type == GgmlType::F32) {
    for (std::size_t i = 0; i < blocks; ++i) {
      const float v = value(rng);
      std::memcpy(&out[i * 4], &v, 4);
    }
    return out;
  }
  if (type == GgmlType::F16 || type == GgmlType::BF16) {
    for (std::size_t i = 0; i < blocks; ++i) {
      const float v = value(rng);
      put16(i * 2, type == GgmlType::F16 ? engine::float_to_fp16(v) : engine::elementwise::bf16_bits(v));
    }
    return out;
  }
  for (std::uint8_t& b : out) b = static_cast<std::uint8_t>(rng() & 0xff);
  // Each type's scale d (offset, size that keeps |weight| of order 1) and,
  // where it has one, its min (offset; stored as dmin or as a negative m).
  struct Scales {
    std::size_t d_at;
    float d;
    int min_at;  // -1: none
    float min;
  };
  Scales s{};
  switch (type) {
    case GgmlType::Q4_0: s = {0, 0.1f, -1, 0}; break;
    case GgmlType::Q4_1: s = {0, 0.1f, 2, -0.8f}; break;
    case GgmlType::Q5_0: s = {0, 0.05f, -1, 0}; break;
    case GgmlType::Q5_1: s = {0, 0.05f, 2, -0.8f}; break;
    case GgmlType::Q8_0: s = {0, 0.008f, -1, 0}; break;
    case GgmlType::Q2_K: s = {80, 0.05f, 82, 0.05f}; break;
    case GgmlType::Q3_K: s = {108, 0.01f, -1, 0}; break;
    case GgmlType::Q4_K: s = {0, 0.005f, 2, 0.005f}; break;
    case GgmlType::Q5_K: s = {0, 0.003f, 2, 0.005f}; break;
    case GgmlType::Q6_K: s = {208, 0.0005f, -1, 0}; break;
    case GgmlType::IQ4_NL: s = {0, 0.005f, -1, 0}; break;
    case GgmlType::IQ4_XS: s = {0, 0.0005f, -1, 0}; break;
    default: throw std::invalid_argument(std::string("random_blocks: no scales for ") + info.name);
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t at = b * info.block_bytes;
    put16(at + s.d_at, engine::float_to_fp16(s.d * unit(rng)));
    if (s.min_at >= 0) put16(at + static_cast<std::size_t>(s.min_at), engine::float_to_fp16(s.min * unit(rng)));
  }
  return out;
}

}  // namespace midtune::testing
