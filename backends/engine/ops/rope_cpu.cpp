#include "backends/engine/ops/rope.hpp"

namespace midtune::engine {

void rope_rotate(float* x, const float* cos_sin, int rope_dims) {
  for (int i = 0; i < rope_dims / 2; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x0 * s + x1 * c;
  }
}

void rope_rotate_halves(float* x, const float* cos_sin, int rope_dims) {
  const int half = rope_dims / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x0 = x[i], x1 = x[i + half];
    x[i] = x0 * c - x1 * s;
    x[i + half] = x0 * s + x1 * c;
  }
}

RopeFn rope_for(Isa isa, RopePairing pairing) {
  if (pairing == RopePairing::halves) {
    return select_body<RopeFn>("rope (halves)", isa, {&rope_rotate_halves, nullptr, nullptr});
  }
  return select_body<RopeFn>("rope", isa, {&rope_rotate, nullptr, nullptr});
}

}  // namespace midtune::engine
