#include "backends/engine/ops/rmsnorm.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine {

namespace {

using RmsNormFn = void (*)(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps,
                           float* y, std::size_t ld_y);

void rms_norm_reference(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps,
                        float* y, std::size_t ld_y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    float* yr = y + r * ld_y;
    double sum = 0.0;
    for (int i = 0; i < width; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float inv = elementwise::rms_inverse(sum, width, eps);
    for (int i = 0; i < width; ++i) yr[i] = elementwise::rms_scale(xr[i], inv, weight[i]);
  }
}

}  // namespace

void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                   std::size_t ld_y, Isa isa) {
  if (rows < 0 || width <= 0 || ld_x < static_cast<std::size_t>(width) || ld_y < static_cast<std::size_t>(width)) {
    throw std::invalid_argument("rmsnorm: " + std::to_string(rows) + " rows of " + std::to_string(width) +
                                " with strides " + std::to_string(ld_x) + ", " + std::to_string(ld_y));
  }
  const RmsNormFn body = select_body<RmsNormFn>("rmsnorm", isa, {&rms_norm_reference, nullptr, nullptr});
  body(x, ld_x, weight, rows, width, eps, y, ld_y);
}

}  // namespace midtune::engine
