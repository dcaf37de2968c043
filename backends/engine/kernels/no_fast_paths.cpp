// Non-x86 builds: only the scalar kernels exist.
#include "backends/engine/kernels/attention.hpp"
#include "backends/engine/kernels/elementwise.hpp"
#include "backends/engine/kernels/packed_matmul.hpp"
#include "backends/engine/kernels/quantize_rows.hpp"

namespace midtune::engine {
PackedTileFn packed_tile_avx2() { return nullptr; }
PackedTileFn packed_tile_avx512vnni() { return nullptr; }
AttentionFn attention_avx512() { return nullptr; }
AttentionFn attention_avx2() { return nullptr; }
QuantizeRowFn quantize_row_avx512() { return nullptr; }
SiluMulFn silu_mul_avx512() { return nullptr; }
}  // namespace midtune::engine
