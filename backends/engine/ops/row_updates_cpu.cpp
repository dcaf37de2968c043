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

}  // namespace midtune::engine
