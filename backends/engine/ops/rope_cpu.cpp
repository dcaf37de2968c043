#include "backends/engine/ops/rope.hpp"

#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine {

void rope_rotate(float* x, const float* cos_sin, int rope_dims) {
  for (int i = 0; i < rope_dims / 2; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    elementwise::rope_rotate_pair(x[2 * i], x[2 * i + 1], c, s, &x[2 * i], &x[2 * i + 1]);
  }
}

void rope_rotate_halves(float* x, const float* cos_sin, int rope_dims) {
  const int half = rope_dims / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    elementwise::rope_rotate_pair(x[i], x[i + half], c, s, &x[i], &x[i + half]);
  }
}

RopeFn rope_for(Isa isa, RopePairing pairing) {
  if (pairing == RopePairing::halves) {
    return select_body<RopeFn>("rope (halves)", isa, {&rope_rotate_halves, nullptr, nullptr});
  }
  return select_body<RopeFn>("rope", isa, {&rope_rotate, nullptr, nullptr});
}

void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                 const double* inverse_frequencies, int pairs, float* cos_sin) {
  for (int table = 0; table < tables; ++table) {
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < pairs; ++i) {
        float* entry = cos_sin + ((static_cast<std::size_t>(table) * tokens + t) * pairs + i) * 2;
        elementwise::rope_cos_sin(positions[t], scales[table], inverse_frequencies[i], entry, entry + 1);
      }
    }
  }
}

}  // namespace midtune::engine
