// The ops whose host body is the same on every device that computes on the
// host (the CPU device, the host reference): the row-wise norms, the gated
// activation, RoPE, the row updates and the methods' readouts, written
// here once over ops/'s bodies. What differs between those devices is
// passed in: the ISA of the SIMD bodies (the reference: scalar) and
// whether rows are split across the thread pool (only prefill-sized calls;
// the reference: never). Every row's numbers are the same either way; the
// devices differ in their weights, KV cache and attention, which stay
// theirs. A new row-wise op is one override here, not one per device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/engine/devices/device.hpp"
#include "backends/engine/devices/host_memory.hpp"
#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

template <typename Base>
class HostBodies : public HostMemoryDevice<Base> {
 public:
  void rms_norm_rows(const float* x, std::size_t ld_x, const float* weight, int rows, int width, float eps, float* y,
                     std::size_t ld_y) override;
  void layer_norm_rows(const float* x, std::size_t ld_x, const float* weight, const float* bias, int rows, int width,
                       float eps, float* y, std::size_t ld_y) override;
  void rms_norm_heads(float* x, std::size_t ld, int tokens, int heads, int head_dim, const float* weight,
                      float eps) override;
  void add_row_vector(float* x, std::size_t ld_x, int rows, const float* v, int width) override;
  void add(float* x, const float* y, std::size_t count) override;
  void cap_values(float* x, std::size_t count, float cap, bool soft) override;
  void gated_activation(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in, int rows,
                        int width, float* out, std::size_t ld_out) override;
  void rope_tables(const double* positions, int tokens, const float* scales, int tables,
                   const double* inverse_frequencies, int pairs, float* cos_sin) override;
  void rope_rows(float* x, std::size_t ld_x, int tokens, int heads, int head_dim, int rope_dims, RopePairing pairing,
                 const float* cos_sin, std::size_t head_table_stride) override;
  void add_channel_column(float* rows, std::size_t ld, int tokens, std::size_t offset, int width,
                          const float* normed, std::size_t normed_ld, int channel, double scale,
                          const float* column) override;
  void last_query_rows(const float* qkv, std::size_t ld, int tokens, int heads, int kv_heads, int head_dim,
                       std::size_t k_offset, float* rows) override;
  void score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold, std::int32_t* argmax,
                  double* gold_logprob) override;

 protected:
  HostBodies(Isa isa, bool parallel_rows) : isa_(isa), parallel_rows_(parallel_rows) {}

 private:
  Isa isa_;
  bool parallel_rows_;
};

// The bodies are compiled once, in host_bodies.cpp, for Device (the CPU)
// and devices::DeviceOps (the host reference).

}  // namespace midtune::engine
