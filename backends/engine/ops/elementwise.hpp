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

// How an architecture shapes the attention scores before the softmax, in
// ggml's order: the scaled score s = scale * q.k is soft-capped,
// s = softcap * tanh(s / softcap) (gemma2's attn_logit_softcapping), then
// ALiBi adds slope_h * -(query position - key position) (MPT; the slopes
// from max_alibi_bias). Zero: off, and every body leaves the scores as they
// were, bit for bit.
struct ScoreShaping {
  float softcap = 0.0f;
  float max_alibi_bias = 0.0f;
  MIDTUNE_HOST_DEVICE bool on() const { return softcap != 0.0f || max_alibi_bias != 0.0f; }
};

// Head h's ALiBi slope among `heads`, as ggml's soft_max and flash attention
// compute it: m0^(h+1) for the first 2^floor(log2 heads) heads, then
// m1^(2(h - that) + 1); 0 without ALiBi.
MIDTUNE_HOST_DEVICE inline float alibi_slope(float max_bias, int head, int heads) {
  if (max_bias <= 0.0f) return 0.0f;
  int log2_heads = 1;
  while (log2_heads * 2 <= heads) log2_heads *= 2;
  const float m0 = ::powf(2.0f, -max_bias / static_cast<float>(log2_heads));
  const float m1 = ::powf(2.0f, -(max_bias / 2.0f) / static_cast<float>(log2_heads));
  return head < log2_heads ? ::powf(m0, static_cast<float>(head + 1))
                           : ::powf(m1, static_cast<float>(2 * (head - log2_heads) + 1));
}

// One scaled score shaped (ScoreShaping): `distance` = query position - key position.
MIDTUNE_HOST_DEVICE inline float shape_score(float score, float softcap, float slope, int distance) {
  if (softcap != 0.0f) score = ::tanhf(score * (1.0f / softcap)) * softcap;
  if (slope != 0.0f) score += slope * -static_cast<float>(distance);
  return score;
}

// A value bounded by `cap`: soft, cap * tanh(x / cap) (gemma2's
// final_logit_softcapping), or hard, clamped to [-cap, cap] (MPT's clamp_kqv).
MIDTUNE_HOST_DEVICE inline float cap_value(float x, float cap, bool soft) {
  if (soft) return ::tanhf(x * (1.0f / cap)) * cap;
  return x < -cap ? -cap : (x > cap ? cap : x);
}

// LayerNorm's row factors (MPT): mean and 1 / sqrt(variance + eps) from the
// row's sum and sum of squares of (x - mean), accumulated in double.
MIDTUNE_HOST_DEVICE inline float layer_norm_inverse(double centred_sum_of_squares, int width, float eps) {
  return static_cast<float>(1.0 / ::sqrt(centred_sum_of_squares / width + eps));
}

// One output of LayerNorm: (x - mean) * inverse * weight + bias (bias 0 where none).
MIDTUNE_HOST_DEVICE inline float layer_norm_scale(float x, float mean, float inverse, float weight, float bias) {
  return (x - mean) * inverse * weight + bias;
}

// PHS eq. 2 by linearity: scaling channel x_c of the normed input by s adds
// delta W[:, c] to the Q and K rows, delta = (s - 1) x_c (in double, rounded
// to float).
MIDTUNE_HOST_DEVICE inline float channel_delta(double scale, float x) { return static_cast<float>((scale - 1.0) * x); }

// Two attentions over disjoint keys merged (merge_attention.hpp): part a's
// share of the union's softmax denominator from the parts' log-sum-exps, and
// an output element from that share (exp in float; a part far behind gets
// weight 0, never NaN, as exp overflows to infinity).
MIDTUNE_HOST_DEVICE inline float merge_weight(float lse_a, float lse_b) {
  return 1.0f / (1.0f + ::expf(lse_b - lse_a));
}
MIDTUNE_HOST_DEVICE inline float merged_value(float weight, float a, float b) {
  return weight * a + (1.0f - weight) * b;
}

// float -> bf16 bits, rounded to nearest even (NaN stays a quiet NaN): how
// weights and activations enter the GPU's bf16 matrix products.
MIDTUNE_HOST_DEVICE inline std::uint16_t bf16_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) return 0x7FC0;
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

// bf16 bits -> float (exact): how a bf16 KV cache's keys and values are read.
MIDTUNE_HOST_DEVICE inline float bf16_value(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

}  // namespace midtune::engine::elementwise
