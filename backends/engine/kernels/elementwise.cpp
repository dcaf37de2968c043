#include "backends/engine/kernels/elementwise.hpp"

#include <cmath>

namespace midtune::engine {

void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width,
                   float eps, float* y, std::size_t ld_y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    float* yr = y + r * ld_y;
    double sum = 0.0;
    for (int i = 0; i < width; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / width + eps));
    for (int i = 0; i < width; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void rope_rotate(float* x, const float* cos_sin, int rope_dims) {
  for (int i = 0; i < rope_dims / 2; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x0 * s + x1 * c;
  }
}

void silu_mul(const float* gate, const float* up, float* out, std::size_t count, Isa isa) {
  if (isa == Isa::avx512vnni && isa_available(isa) && silu_mul_avx512() != nullptr) {
    silu_mul_avx512()(gate, up, out, count);
    return;
  }
  for (std::size_t i = 0; i < count; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace midtune::engine
