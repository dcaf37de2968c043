// Non-x86 builds: only the scalar bodies exist.
#include "backends/engine/ops/cpu/bodies.hpp"

namespace midtune::engine::cpu {
PackedTileFn matmul_tile_avx2() { return nullptr; }
PackedTileFn matmul_tile_avxvnni() { return nullptr; }
PackedTileFn matmul_tile_avx512vnni() { return nullptr; }
FloatTileFn float_tile_avx2() { return nullptr; }
FloatTileFn float_tile_avx512() { return nullptr; }
FloatTileFn float_tile_avx512bf16() { return nullptr; }
AttentionFn attention_avx2() { return nullptr; }
AttentionFn attention_avx512() { return nullptr; }
const AttentionParts* attention_parts_avx2() { return nullptr; }
const AttentionParts* attention_parts_avx512() { return nullptr; }
QuantizeRowFn quantize_row_avx2() { return nullptr; }
QuantizeRowFn quantize_row_avx512() { return nullptr; }
GatedMulFn silu_mul_avx2() { return nullptr; }
GatedMulFn silu_mul_avx512() { return nullptr; }
GatedMulFn gelu_mul_avx2() { return nullptr; }
GatedMulFn gelu_mul_avx512() { return nullptr; }
}  // namespace midtune::engine::cpu
