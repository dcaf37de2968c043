// The per-element arithmetic of the element-wise ops, written once for every
// device: the CPU reference bodies (<op>_cpu.cpp) and the CUDA kernels
// (<op>_cuda.cu) both call these functions, so the CPU tests run the very
// expressions the GPU evaluates, and a kernel differs from its reference only
// in summation order and in the device's math library (expf, tanhf, cos and
// sin are within a few ulp of the host's).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MIDTUNE_HOST_DEVICE __host__ __device__
#else
#define MIDTUNE_HOST_DEVICE
#endif

namespace midtune::engine::elementwise {

// RMSNorm's row factor 1 / sqrt(mean(x^2) + eps) from the row's sum of
// squares (accumulated in double by every body).
MIDTUNE_HOST_DEVICE inline float rms_inverse(double sum_of_squares, int width, float eps) {
  return static_cast<float>(1.0 / ::sqrt(sum_of_squares / width + eps));
}

// One output of RMSNorm: x * inverse * weight, in this order (float).
MIDTUNE_HOST_DEVICE inline float rms_scale(float x, float inverse, float weight) { return x * inverse * weight; }

// The RoPE table entry of one dimension pair: angle = (position / scale) *
// inverse_frequency (the model's base, linear scaling and frequency factors
// are in inverse_frequency; a method's per-layer or per-head scale divides
// the position), in double, then rounded to float.
MIDTUNE_HOST_DEVICE inline void rope_cos_sin(double position, float scale, double inverse_frequency, float* cos_out,
                                             float* sin_out) {
  const double angle = position / static_cast<double>(scale) * inverse_frequency;
  *cos_out = static_cast<float>(::cos(angle));
  *sin_out = static_cast<float>(::sin(angle));
}

// One rotated dimension pair (x0, x1) by the angle whose cosine and sine are c, s.
MIDTUNE_HOST_DEVICE inline void rope_rotate_pair(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = x0 * c - x1 * s;
  *y1 = x0 * s + x1 * c;
}

// SwiGLU: silu(gate) * up, silu(g) = g / (1 + exp(-g)).
MIDTUNE_HOST_DEVICE inline float silu_mul(float gate, float up) { return gate / (1.0f + ::expf(-gate)) * up; }

// GeGLU: gelu(gate) * up, gelu in its tanh approximation as llama.cpp's
// ggml_gelu: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
MIDTUNE_HOST_DEVICE inline float gelu_tanh_mul(float gate, float up) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCubic = 0.044715f;
  return 0.5f * gate * (1.0f + ::tanhf(kSqrt2OverPi * gate * (1.0f + kCubic * gate * gate))) * up;
}

// PHS eq. 2 by linearity: scaling channel x_c of the normed input by s adds
// delta W[:, c] to the Q and K rows, delta = (s - 1) x_c (in double, rounded
// to float).
MIDTUNE_HOST_DEVICE inline float channel_delta(double scale, float x) { return static_cast<float>((scale - 1.0) * x); }

// float -> bf16 bits, rounded to nearest even (NaN stays a quiet NaN): how
// weights and activations enter the GPU's bf16 matrix products.
MIDTUNE_HOST_DEVICE inline std::uint16_t bf16_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) return 0x7FC0;
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace midtune::engine::elementwise
