#include "backends/engine/ops/row_updates.hpp"

#include <stdexcept>
#include <string>

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine {

void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, int group, int head_dim,
                         const float* key0_weight, std::size_t key0_ld, const float* factors, const float* v0,
                         std::size_t v0_stride) {
  for (int h = 0; h < heads; ++h) {
    const float* value = v0 + static_cast<std::size_t>(h / group) * v0_stride;
    for (int t = 0; t < tokens; ++t) {
      const float alpha = factors[t];
      if (alpha == 1.0f) continue;
      const float step = (alpha - 1.0f) * key0_weight[static_cast<std::size_t>(h) * key0_ld + t];
      float* o = out + t * out_ld + static_cast<std::size_t>(h) * head_dim;
      for (int i = 0; i < head_dim; ++i) o[i] += step * value[i];
    }
  }
}

void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width, const float* normed,
                        std::size_t normed_ld, int channel, double scale, const float* column) {
  for (int t = 0; t < tokens; ++t) {
    const float delta = elementwise::channel_delta(scale, normed[t * normed_ld + channel]);
    float* row = rows + t * ld + offset;
    for (int i = 0; i < width; ++i) row[i] += delta * column[i];
  }
}

void cap_values(float* x, std::size_t count, float cap, bool soft) {
  if (!(cap > 0.0f)) throw std::invalid_argument("cap_values: cap " + std::to_string(cap) + " must be > 0");
  for (std::size_t i = 0; i < count; ++i) x[i] = elementwise::cap_value(x[i], cap, soft);
}

namespace ops {

void add_row_vector(const OpTarget& at, float* x, std::size_t ld_x, int rows, const float* v, int width) {
  if (at.on_cuda()) MIDTUNE_CUDA_BODY(cuda::add_row_vector(x, ld_x, rows, v, width, at.stream));
  for (int r = 0; r < rows; ++r) {
    float* row = x + r * ld_x;
    for (int i = 0; i < width; ++i) row[i] += v[i];
  }
}

void add(const OpTarget& at, float* x, const float* y, std::size_t count) {
  if (at.on_cuda()) MIDTUNE_CUDA_BODY(cuda::add(x, y, count, at.stream));
  for (std::size_t i = 0; i < count; ++i) x[i] += y[i];
}

void cap_values(const OpTarget& at, float* x, std::size_t count, float cap, bool soft) {
  if (at.on_cuda()) MIDTUNE_CUDA_BODY(cuda::cap_values(x, count, cap, soft, at.stream));
  engine::cap_values(x, count, cap, soft);
}

void add_channel_column(const OpTarget& at, float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                        const float* normed, std::size_t normed_ld, int channel, double scale, const float* column) {
  if (at.on_cuda()) {
    MIDTUNE_CUDA_BODY(cuda::add_channel_column(rows, ld, tokens, offset, width, normed, normed_ld, channel, scale,
                                               column, at.stream));
  }
  engine::add_channel_column(rows, ld, tokens, offset, width, normed, normed_ld, channel, scale, column);
}

}  // namespace ops

}  // namespace midtune::engine
