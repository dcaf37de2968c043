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

RopeFn rope_for(Isa isa) { return select_body<RopeFn>("rope", isa, {&rope_rotate, nullptr, nullptr}); }

}  // namespace midtune::engine
