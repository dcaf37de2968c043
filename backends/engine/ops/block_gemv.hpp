// Matrix products that read the weights straight from their ggml blocks
// (block_units.hpp), for products of few rows (the GPU's decode steps): no
// bf16 copy of the matrix is made. The contract is matmul_bf16's over the
// weights dequantize_bf16 would make:
//   y[r][o] = sum_k bf16(x[r][k]) * bf16(w[o][k]),   r < rows, o < outputs
// with x given as bf16 bits (rows ld_x apart), w[o][k] = dequantize_row's
// value k of block row o (rows `row_bytes` apart), bf16() rounding to
// nearest even (elementwise::bf16_bits), products and sums in fp32 (a
// product of two bf16 values is exact in fp32, so only the summation order
// differs from cuBLAS over the dequantised tile). Types: Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0 (cols a multiple of 32), Q4_K, Q5_K, Q6_K (of 256), by ggml id.
// Bad arguments throw std::invalid_argument naming the op.
#pragma once

#include <cstddef>
#include <cstdint>

namespace midtune::engine {

// The host body beside the kernel: the kernel's own units of
// block_units.hpp, summed in double (tests check the kernel against it and
// it against dequantize_row's product).
void block_gemv_host(std::uint32_t ggml_type, const void* blocks, std::size_t row_bytes, int outputs, int cols,
                     const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y);

#if defined(MIDTUNE_WITH_CUDA)
namespace cuda {

// The CUDA body (block_gemv_cuda.cu), on device pointers; x's rows 16-byte
// aligned (ld_x a multiple of 8). Every weight is read and dequantised once
// per 16 rows of x, and the multiply-adds run without tensor cores: meant
// for few rows (DeviceOps::kBlockGemvRows). Asynchronous on
// `stream` (a cudaStream_t; nullptr: the default stream).
void block_gemv(std::uint32_t ggml_type, const void* blocks, std::size_t row_bytes, int outputs, int cols,
                const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y,
                void* stream = nullptr);

}  // namespace cuda
#endif

}  // namespace midtune::engine
