// The templated SIMD bodies instantiated for AVX-512 (built with the
// -mavx512* flags; called only after dispatch found AVX-512 VNNI). The packed
// matmul (vpdpbusd) and the quantiser have AVX-512-only algorithms in
// matmul_avx512.cpp and quantize_rows_avx512.cpp.
#include "backends/engine/ops/cpu/attention_body.hpp"
#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/cpu/float_matmul_body.hpp"
#include "backends/engine/ops/cpu/glu_body.hpp"
#include "backends/engine/ops/cpu/vec.hpp"

namespace midtune::engine::cpu {

AttentionFn attention_avx512() { return &AttentionBody<VecAvx512>::run; }
const AttentionParts* attention_parts_avx512() {
  static const AttentionParts parts = AttentionBody<VecAvx512>::parts();
  return &parts;
}
GatedMulFn silu_mul_avx512() { return &silu_mul_body<VecAvx512>; }
GatedMulFn gelu_mul_avx512() { return &gelu_mul_body<VecAvx512>; }
FloatTileFn float_tile_avx512() { return &float_tile_body<VecAvx512>; }

}  // namespace midtune::engine::cpu
