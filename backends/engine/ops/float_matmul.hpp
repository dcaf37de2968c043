// y[t][n] = sum_k x[t][k] * W[n][k] for float weights W (ops/float_matrix.hpp)
// and fp32 activations x: fp32 products, fp32 accumulation, fp16 / bf16
// weights widened to fp32 in the kernel. No activation quantisation, so the
// result is the fp32 product of the stored weights up to summation order.
// Bodies: scalar reference (k in order per output), AVX2 (FMA, F16C) and
// AVX-512, both from one template (ops/cpu/float_matmul_body.hpp): each output
// is summed over k in order, as in the scalar body, but with fused
// multiply-adds, so they differ from it by rounding only.
// The one exception to "activations stay fp32": BF16 weights on a CPU with
// AVX512-BF16 (Isa::avx512bf16) run bf16 x bf16 products with fp32
// accumulation (ops/cpu/float_matmul_avx512bf16.cpp): the activations are
// rounded to bf16 first (8 significant bits), so the result moves by up to 2^-8 of
// sum_k |x[t][k] W[n][k]|; F32 and F16 weights keep the fp32 body there.
// In every body a token's outputs do not depend on the other tokens of the
// call (prefill and decode agree bit for bit). Dispatch as in ops/dispatch.hpp.
// Arguments checked: x row stride ldx >= w.cols, ldy >= w.rows, tokens >= 0.
#pragma once

#include <cstddef>

#include "backends/engine/ops/dispatch.hpp"
#include "backends/engine/ops/float_matrix.hpp"

namespace midtune::engine {

// One kernel call: tokens [t0, t1) of x against row groups [g0, g1) of w,
// writing y[t][group*16 + r] for the rows that exist.
using FloatTileFn = void (*)(const FloatMatrix& w, int g0, int g1, const float* x, std::size_t ldx, int t0,
                             int t1, float* y, std::size_t ldy);

FloatTileFn float_tile_scalar();
// The dispatch rule of ops/dispatch.hpp; the avx512bf16 body exists for bf16
// weights only.
FloatTileFn float_tile_for(Isa isa, FloatFormat format);

// The whole product, parallel over row groups and token chunks with oneTBB
// when `parallel` (as packed_matmul).
void float_matmul(const FloatMatrix& w, const float* x, int tokens, std::size_t ldx, float* y, std::size_t ldy,
                  Isa isa, bool parallel = true);

}  // namespace midtune::engine
