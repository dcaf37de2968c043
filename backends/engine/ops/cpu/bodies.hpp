// The SIMD bodies of every op, one getter per (op, ISA); each returns nullptr
// when this build has no such body (no_fast_paths.cpp on non-x86). Defined in
// the per-ISA translation units of ops/cpu/ (the only files compiled with
// -mavx2 / -mavxvnni / -mavx512*); called only through select_body (ops/dispatch.hpp),
// which checks the CPU first.
#pragma once

#include "backends/engine/ops/attention.hpp"
#include "backends/engine/ops/float_matmul.hpp"
#include "backends/engine/ops/gated_activation.hpp"
#include "backends/engine/ops/matmul.hpp"
#include "backends/engine/ops/quantize_rows.hpp"

namespace midtune::engine::cpu {

PackedTileFn matmul_tile_avx2();
PackedTileFn matmul_tile_avxvnni();
PackedTileFn matmul_tile_avx512vnni();
FloatTileFn float_tile_avx2();
FloatTileFn float_tile_avx512();
// BF16 weights only (the other formats run float_tile_avx512 there).
FloatTileFn float_tile_avx512bf16();
AttentionFn attention_avx2();
AttentionFn attention_avx512();
const AttentionParts* attention_parts_avx2();
const AttentionParts* attention_parts_avx512();
QuantizeRowFn quantize_row_avx2();
QuantizeRowFn quantize_row_avx512();
GatedMulFn silu_mul_avx2();
GatedMulFn silu_mul_avx512();
GatedMulFn gelu_mul_avx2();
GatedMulFn gelu_mul_avx512();

}  // namespace midtune::engine::cpu
