// IEEE half and bfloat16 to float, portable bit manipulation (the scalar
// reference; fast paths use F16C's vcvtph2ps, which gives identical results).
#pragma once

#include <cstdint>
#include <cstring>

namespace midtune::engine {

inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Round to nearest even; overflow goes to inf.
inline std::uint16_t float_to_fp16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) return sign | 0x7c00u | (abs_bits > 0x7f800000u ? 0x200u : 0u);
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504
  if (abs_bits < 0x38800000u) {  // subnormal half (or zero)
    if (abs_bits < 0x33000000u) return sign;
    const std::uint32_t exponent = abs_bits >> 23;
    const std::uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | static_cast<std::uint16_t>(half);
  }
  std::uint32_t half = ((abs_bits - 0x38000000u) >> 13);
  const std::uint32_t rest = abs_bits & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<std::uint16_t>(half);
}

inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace midtune::engine
