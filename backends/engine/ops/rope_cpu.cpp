#include "backends/engine/ops/rope.hpp"

#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/row_parallel.hpp"

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

namespace ops {

void rope_tables(const OpTarget& at, const double* positions, int tokens, const float* scales, int tables,
                 const double* inverse_frequencies, int pairs, float* cos_sin) {
  if (at.on_cuda()) {
    MIDTUNE_CUDA_BODY(
        cuda::rope_tables(positions, tokens, scales, tables, inverse_frequencies, pairs, cos_sin, at.stream));
  }
  engine::rope_tables(positions, tokens, scales, tables, inverse_frequencies, pairs, cos_sin);
}

void rope_rows(const OpTarget& at, float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims,
               RopePairing pairing, const float* cos_sin, std::size_t head_table_stride) {
  if (at.on_cuda()) {
    MIDTUNE_CUDA_BODY(
        cuda::rope_rows(x, ld_x, tokens, heads, head_dim, rope_dims, pairing, cos_sin, head_table_stride, at.stream));
  }
  const RopeFn rope = rope_for(at.isa, pairing);
  row_parallel::for_each_index(
      heads, tokens,
      [&](int h) {
        for (int t = 0; t < tokens; ++t) {
          rope(x + t * ld_x + static_cast<std::size_t>(h) * head_dim,
               cos_sin + h * head_table_stride + static_cast<std::size_t>(t) * rope_dims, rope_dims);
        }
      },
      at.parallel_rows);
}

}  // namespace ops

}  // namespace midtune::engine
