#include "backends/engine/ops/rmsnorm.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/row_parallel.hpp"

namespace midtune::engine {

namespace {

using RmsNormFn = void (*)(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps,
                           float* y, std::size_t ld_y);

void rms_norm_reference(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps,
                        float* y, std::size_t ld_y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    float* yr = y + r * ld_y;
    // Four running sums: one chain of dependent double adds was ~3 % of a
    // prefill. The double sum's order moves it by ulps of a double, far
    // below the float the inverse is rounded to.
    double sums[4] = {0.0, 0.0, 0.0, 0.0};
    int i = 0;
    for (; i + 4 <= width; i += 4) {
      for (int j = 0; j < 4; ++j) sums[j] += static_cast<double>(xr[i + j]) * xr[i + j];
    }
    for (; i < width; ++i) sums[0] += static_cast<double>(xr[i]) * xr[i];
    const float inv = elementwise::rms_inverse((sums[0] + sums[1]) + (sums[2] + sums[3]), width, eps);
    for (int i = 0; i < width; ++i) yr[i] = elementwise::rms_scale(xr[i], inv, weight[i]);
  }
}

void check_norm_args(const char* op, int rows, int width, std::size_t ld_x, std::size_t ld_y) {
  if (rows < 0 || width <= 0 || ld_x < static_cast<std::size_t>(width) || ld_y < static_cast<std::size_t>(width)) {
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(rows) + " rows of " + std::to_string(width) +
                                " with strides " + std::to_string(ld_x) + ", " + std::to_string(ld_y));
  }
}

}  // namespace

void layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows, int width,
                     float eps, float* y, std::size_t ld_y) {
  check_norm_args("layernorm", rows, width, ld_x, ld_y);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    float* yr = y + r * ld_y;
    double sum = 0.0;
    for (int i = 0; i < width; ++i) sum += xr[i];
    const float mean = static_cast<float>(sum / width);
    double squares = 0.0;
    for (int i = 0; i < width; ++i) squares += static_cast<double>(xr[i] - mean) * (xr[i] - mean);
    const float inv = elementwise::layer_norm_inverse(squares, width, eps);
    for (int i = 0; i < width; ++i) {
      yr[i] = elementwise::layer_norm_scale(xr[i], mean, inv, weight[i], bias != nullptr ? bias[i] : 0.0f);
    }
  }
}

void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                   std::size_t ld_y, Isa isa) {
  check_norm_args("rmsnorm", rows, width, ld_x, ld_y);
  const RmsNormFn body = select_body<RmsNormFn>("rmsnorm", isa, {&rms_norm_reference, nullptr, nullptr});
  body(x, ld_x, weight, rows, width, eps, y, ld_y);
}

namespace ops {

using row_parallel::for_row_ranges;

void rms_norm_rows(const OpTarget& at, const float* x, std::size_t ld_x, const float* weight, int rows, int width,
                   float eps, float* y, std::size_t ld_y) {
  if (at.on_cuda()) MIDTUNE_CUDA_BODY(cuda::rms_norm_rows(x, ld_x, weight, rows, width, eps, y, ld_y, at.stream));
  for_row_ranges(
      rows, 16,
      [&](const tbb::blocked_range<int>& r) {
        engine::rms_norm_rows(x + r.begin() * ld_x, ld_x, weight, static_cast<int>(r.size()), width, eps,
                              y + r.begin() * ld_y, ld_y, at.isa);
      },
      at.parallel_rows);
}

void layer_norm_rows(const OpTarget& at, const float* x, std::size_t ld_x, const float* weight, const float* bias,
                     int rows, int width, float eps, float* y, std::size_t ld_y) {
  if (at.on_cuda()) {
    MIDTUNE_CUDA_BODY(cuda::layer_norm_rows(x, ld_x, weight, bias, rows, width, eps, y, ld_y, at.stream));
  }
  for_row_ranges(
      rows, 16,
      [&](const tbb::blocked_range<int>& r) {
        engine::layer_norm_rows(x + r.begin() * ld_x, ld_x, weight, bias, static_cast<int>(r.size()), width, eps,
                                y + r.begin() * ld_y, ld_y);
      },
      at.parallel_rows);
}

// A token's heads are contiguous rows of head_dim: rms_norm_rows over them,
// in place, so a head's result equals a row's.
void rms_norm_heads(const OpTarget& at, float* x, std::size_t ld, int tokens, int heads, int head_dim,
                    const float* weight, float eps) {
  if (at.on_cuda()) MIDTUNE_CUDA_BODY(cuda::rms_norm_heads(x, ld, tokens, heads, head_dim, weight, eps, at.stream));
  for_row_ranges(
      tokens, 16,
      [&](const tbb::blocked_range<int>& r) {
        for (int t = r.begin(); t < r.end(); ++t) {
          float* row = x + t * ld;
          engine::rms_norm_rows(row, head_dim, weight, heads, head_dim, eps, row, head_dim, at.isa);
        }
      },
      at.parallel_rows);
}

}  // namespace ops

}  // namespace midtune::engine
