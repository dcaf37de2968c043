// CUDA body of rope.hpp (declared there): the tables and the rotation,
// one thread per (table, token, pair) and per (token, head, pair), with
// elementwise.hpp's functions as the CPU reference and model.cpp's tables use.
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/rope.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

namespace {

__global__ void rope_tables_kernel(const double* positions, int tokens, const float* scales, int tables,
                                   const double* inverse_frequencies, int pairs, float* cos_sin) {
  const std::size_t index = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t total = static_cast<std::size_t>(tables) * tokens * pairs;
  if (index >= total) return;
  const int pair = static_cast<int>(index % pairs);
  const int token = static_cast<int>((index / pairs) % tokens);
  const int table = static_cast<int>(index / (static_cast<std::size_t>(pairs) * tokens));
  elementwise::rope_cos_sin(positions[token], scales[table], inverse_frequencies[pair], &cos_sin[2 * index],
                            &cos_sin[2 * index + 1]);
}

__global__ void rope_rows_kernel(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int pairs,
                                 bool halves, const float* cos_sin, std::size_t head_table_stride) {
  const std::size_t index = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t total = static_cast<std::size_t>(tokens) * heads * pairs;
  if (index >= total) return;
  const int pair = static_cast<int>(index % pairs);
  const int head = static_cast<int>((index / pairs) % heads);
  const int token = static_cast<int>(index / (static_cast<std::size_t>(pairs) * heads));
  float* row = x + token * ld_x + static_cast<std::size_t>(head) * head_dim;
  const float* entry = cos_sin + head * head_table_stride + (static_cast<std::size_t>(token) * pairs + pair) * 2;
  // adjacent (ggml NORM): (2i, 2i+1); halves (ggml NEOX): (i, i + rope_dims/2).
  const int first = halves ? pair : 2 * pair;
  const int second = halves ? pair + pairs : 2 * pair + 1;
  elementwise::rope_rotate_pair(row[first], row[second], entry[0], entry[1], &row[first], &row[second]);
}

}  // namespace

void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                 const double* inverse_frequencies, int pairs, float* cos_sin, void* stream) {
  if (tokens < 0 || tables < 0 || pairs <= 0) {
    throw std::invalid_argument("rope tables (cuda): " + std::to_string(tables) + " tables of " +
                                std::to_string(tokens) + " tokens x " + std::to_string(pairs) + " pairs");
  }
  const std::size_t total = static_cast<std::size_t>(tables) * tokens * pairs;
  if (total == 0) return;
  rope_tables_kernel<<<blocks_for(total), kThreadsPerBlock, 0, as_stream(stream)>>>(
      positions, tokens, scales, tables, inverse_frequencies, pairs, cos_sin);
  check_launch("rope tables");
}

void rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims, RopePairing pairing,
               const float* cos_sin, std::size_t head_table_stride, void* stream) {
  if (tokens < 0 || heads <= 0 || head_dim <= 0 || rope_dims < 0 || rope_dims % 2 != 0 || rope_dims > head_dim ||
      ld_x < static_cast<std::size_t>(heads) * head_dim) {
    throw std::invalid_argument("rope (cuda): " + std::to_string(tokens) + " tokens of " + std::to_string(heads) +
                                " heads x " + std::to_string(head_dim) + ", rope_dims " + std::to_string(rope_dims) +
                                ", stride " + std::to_string(ld_x));
  }
  const int pairs = rope_dims / 2;
  const std::size_t total = static_cast<std::size_t>(tokens) * heads * pairs;
  if (total == 0) return;
  rope_rows_kernel<<<blocks_for(total), kThreadsPerBlock, 0, as_stream(stream)>>>(
      x, ld_x, tokens, heads, head_dim, pairs, pairing == RopePairing::halves, cos_sin, head_table_stride);
  check_launch("rope");
}

}  // namespace midtune::engine::cuda
