// Activations quantised per row and per 32-element block to int8 (like
// ggml's Q8_1): x ~ d * q with d = max|x| / 127, plus s = d * sum(q), which
// the matmul needs for the weights' per-block offset term.
// Bodies: scalar, AVX2, AVX-512 (bit-identical); dispatch as in ops/dispatch.hpp;
// the SIMD body hands rows whose length is not a multiple of 32 to the
// scalar body. Arguments checked: rows >= 0, cols > 0, ld >= cols.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/engine/ops/aligned_buffer.hpp"
#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

inline constexpr int kQuantBlock = 32;
// Below the smallest normal float, 1 / d overflows to infinity (and 0 * inf
// is NaN): such a block, max|x| < 1.5e-36, quantises to zeros.
inline constexpr float kMinQuantScale = 1.17549435e-38f;  // FLT_MIN

struct QuantizedRows {
  int rows = 0;
  int cols = 0;    // logical row length
  int blocks = 0;  // ceil(cols / 32); the tail of the last block is zero
  AlignedBuffer<std::int8_t> q;  // rows x blocks*32
  AlignedBuffer<float> d;        // rows x blocks
  AlignedBuffer<float> s;        // rows x blocks
  // q in balanced base 16, for a matmul body that cannot multiply two full
  // bytes exactly (AVX2 without VNNI): q = 16 hi + lo with lo in [-8, 7] and
  // hi in [-8, 8]. Per block, the 32 lo then the 32 hi (rows x blocks*64).
  // Valid only while has_digits: add_digits fills them, quantize_rows clears
  // the flag.
  AlignedBuffer<std::int8_t> digits;
  bool has_digits = false;

  const std::int8_t* row_q(int r) const { return q.data() + static_cast<std::size_t>(r) * blocks * kQuantBlock; }
  const std::int8_t* row_digits(int r) const {
    return digits.data() + static_cast<std::size_t>(r) * blocks * 2 * kQuantBlock;
  }
  const float* row_d(int r) const { return d.data() + static_cast<std::size_t>(r) * blocks; }
  const float* row_s(int r) const { return s.data() + static_cast<std::size_t>(r) * blocks; }
};

// Quantises `rows` rows of `cols` floats (row stride `ld`) into `out`,
// reusing its storage when large enough, rows in parallel (oneTBB) beyond 16;
// throws std::domain_error naming the row and column of the first NaN or
// infinity (out's contents are then unspecified). Every path gives identical bytes
// (round to nearest even, as nearbyint in the default rounding mode).
void quantize_rows(const float* x, int rows, int cols, std::size_t ld, QuantizedRows& out,
                   Isa isa = Isa::scalar);

// Fills x.digits from x.q (all rows) and sets x.has_digits.
void add_digits(QuantizedRows& x);

// A body: one row of `cols` floats into ceil(cols / 32) blocks.
using QuantizeRowFn = void (*)(const float* x, int cols, std::int8_t* q, float* d, float* s);
QuantizeRowFn quantize_row_scalar();
QuantizeRowFn quantize_row_for(Isa isa);  // the dispatch rule of ops/dispatch.hpp

}  // namespace midtune::engine
