#include "backends/engine/ops/gated_activation.hpp"

#include <vector>

#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/row_parallel.hpp"

namespace midtune::engine {

namespace {

void silu_mul_reference(const float* gate, const float* up, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) out[i] = elementwise::silu_mul(gate[i], up[i]);
}

void gelu_tanh_mul_reference(const float* gate, const float* up, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) out[i] = elementwise::gelu_tanh_mul(gate[i], up[i]);
}

}  // namespace

GatedMulFn gated_mul_for(FfnActivation activation, Isa isa) {
  if (activation == FfnActivation::gelu_tanh)
    return select_body<GatedMulFn>("geglu", isa,
                                   {&gelu_tanh_mul_reference, cpu::gelu_mul_avx2(), nullptr, cpu::gelu_mul_avx512()});
  return select_body<GatedMulFn>("swiglu", isa,
                                 {&silu_mul_reference, cpu::silu_mul_avx2(), nullptr, cpu::silu_mul_avx512()});
}

void gated_activation_rows(FfnActivation activation, const float* gate, const float* up, std::size_t ld_in, int rows,
                           int width, float* out, std::size_t ld_out, Isa isa) {
  const GatedMulFn body = gated_mul_for(activation, isa);
  const std::vector<float> ones(up == nullptr ? static_cast<std::size_t>(width) : 0, 1.0f);
  for (int r = 0; r < rows; ++r) {
    const std::size_t row = static_cast<std::size_t>(r);
    body(gate + row * ld_in, up != nullptr ? up + row * ld_in : ones.data(), out + row * ld_out,
         static_cast<std::size_t>(width));
  }
}

namespace ops {

void gated_activation(const OpTarget& at, FfnActivation activation, const float* gate, const float* up,
                      std::size_t ld_in, int rows, int width, float* out, std::size_t ld_out) {
  if (at.on_cuda()) {
    MIDTUNE_CUDA_BODY(cuda::gated_activation_rows(activation, gate, up, ld_in, rows, width, out, ld_out, at.stream));
  }
  row_parallel::for_row_ranges(
      rows, 8,
      [&](const tbb::blocked_range<int>& r) {
        const std::size_t first = static_cast<std::size_t>(r.begin());
        gated_activation_rows(activation, gate + first * ld_in, up != nullptr ? up + first * ld_in : nullptr, ld_in,
                              r.end() - r.begin(), width, out + first * ld_out, ld_out, at.isa);
      },
      at.parallel_rows);
}

}  // namespace ops

}  // namespace midtune::engine
