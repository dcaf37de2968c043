#include "backends/engine/devices/host_bodies.hpp"

#include "backends/engine/devices/device_ops.hpp"
#include "backends/engine/devices/row_parallel.hpp"
#include "backends/engine/ops/gated_activation.hpp"
#include "backends/engine/ops/last_query_rows.hpp"
#include "backends/engine/ops/rmsnorm.hpp"
#include "backends/engine/ops/rope.hpp"
#include "backends/engine/ops/row_updates.hpp"
#include "backends/engine/ops/scoring.hpp"

namespace midtune::engine {

using row_parallel::for_each_index;
using row_parallel::for_row_ranges;

template <typename Base>
void HostBodies<Base>::rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width,
                                     float eps, float* y, std::size_t ld_y) {
  for_row_ranges(
      rows, 16,
      [&](const tbb::blocked_range<int>& r) {
        engine::rms_norm_rows(x + r.begin() * ld_x, ld_x, weight, static_cast<int>(r.size()), width, eps,
                              y + r.begin() * ld_y, ld_y, isa_);
      },
      parallel_rows_);
}

template <typename Base>
void HostBodies<Base>::layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias,
                                       int rows, int width, float eps, float* y, std::size_t ld_y) {
  for_row_ranges(
      rows, 16,
      [&](const tbb::blocked_range<int>& r) {
        engine::layer_norm_rows(x + r.begin() * ld_x, ld_x, weight, bias, static_cast<int>(r.size()), width, eps,
                                y + r.begin() * ld_y, ld_y);
      },
      parallel_rows_);
}

// A token's heads are contiguous rows of head_dim: rms_norm_rows over them,
// in place, so a head's result equals a row's.
template <typename Base>
void HostBodies<Base>::rms_norm_heads(float* x, std::size_t ld, int tokens, int heads, int head_dim,
                                      const float* weight, float eps) {
  for_row_ranges(
      tokens, 16,
      [&](const tbb::blocked_range<int>& r) {
        for (int t = r.begin(); t < r.end(); ++t) {
          float* row = x + t * ld;
          engine::rms_norm_rows(row, head_dim, weight, heads, head_dim, eps, row, head_dim, isa_);
        }
      },
      parallel_rows_);
}

template <typename Base>
void HostBodies<Base>::add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + r * ld_x;
    for (int i = 0; i < width; ++i) row[i] += v[i];
  }
}

template <typename Base>
void HostBodies<Base>::add(float* x, const float* y, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) x[i] += y[i];
}

template <typename Base>
void HostBodies<Base>::cap_values(float* x, std::size_t count, float cap, bool soft) {
  engine::cap_values(x, count, cap, soft);
}

template <typename Base>
void HostBodies<Base>::gated_activation(FfnActivation activation, const float* gate, const float* up,
                                        std::size_t ld_in, int rows, int width, float* out, std::size_t ld_out) {
  for_row_ranges(
      rows, 8,
      [&](const tbb::blocked_range<int>& r) {
        const std::size_t first = static_cast<std::size_t>(r.begin());
        engine::gated_activation_rows(activation, gate + first * ld_in, up != nullptr ? up + first * ld_in : nullptr,
                                      ld_in, r.end() - r.begin(), width, out + first * ld_out, ld_out, isa_);
      },
      parallel_rows_);
}

template <typename Base>
void HostBodies<Base>::rope_tables(const double* positions, int tokens, const float* scales, int tables,
                                   const double* inverse_frequencies, int pairs, float* cos_sin) {
  engine::rope_tables(positions, tokens, scales, tables, inverse_frequencies, pairs, cos_sin);
}

template <typename Base>
void HostBodies<Base>::rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims,
                                 RopePairing pairing, const float* cos_sin, std::size_t head_table_stride) {
  const RopeFn rope = rope_for(isa_, pairing);
  for_each_index(
      heads, tokens,
      [&](int h) {
        for (int t = 0; t < tokens; ++t) {
          rope(x + t * ld_x + static_cast<std::size_t>(h) * head_dim,
               cos_sin + h * head_table_stride + static_cast<std::size_t>(t) * rope_dims, rope_dims);
        }
      },
      parallel_rows_);
}

template <typename Base>
void HostBodies<Base>::add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                                          const float* normed, std::size_t normed_ld, int channel, double scale,
                                          const float* column) {
  engine::add_channel_column(rows, ld, tokens, offset, width, normed, normed_ld, channel, scale, column);
}

template <typename Base>
void HostBodies<Base>::last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads,
                                       int head_dim, std::size_t k_offset, float* rows) {
  last_query_rows_before_rope(qkv, ld, tokens, heads, kv_heads, head_dim, k_offset, rows);
}

template <typename Base>
void HostBodies<Base>::score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold,
                                  std::int32_t* argmax, double* gold_logprob) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<std::size_t>(r) * vocab;
    argmax[r] = argmax_row(row, vocab);
    if (gold != nullptr) gold_logprob[r] = log_softmax_at(row, vocab, gold[r]);
  }
}

template class HostBodies<Device>;
template class HostBodies<devices::DeviceOps>;

}  // namespace midtune::engine
