// The templated SIMD bodies instantiated for AVX2 (built with -mavx2 -mfma
// -mf16c; called only after dispatch found AVX2). The packed matmul's AVX2
// body is its own algorithm (vpmaddubsw) in matmul_avx2.cpp.
#include "backends/engine/ops/cpu/attention_body.hpp"
#include "backends/engine/ops/cpu/bodies.hpp"
#include "backends/engine/ops/cpu/float_matmul_body.hpp"
#include "backends/engine/ops/cpu/glu_body.hpp"
#include "backends/engine/ops/cpu/vec.hpp"

namespace midtune::engine::cpu {

AttentionFn attention_avx2() { return &AttentionBody<VecAvx2>::run; }
const AttentionParts* attention_parts_avx2() {
  static const AttentionParts parts = AttentionBody<VecAvx2>::parts();
  return &parts;
}
FloatTileFn float_tile_avx2() { return &float_tile_body<VecAvx2>; }
GatedMulFn silu_mul_avx2() { return &silu_mul_body<VecAvx2>; }
GatedMulFn gelu_mul_avx2() { return &gelu_mul_body<VecAvx2>; }
// The quantiser's AVX2 body is in quantize_rows_avx2.cpp.

}  // namespace midtune::engine::cpu
