// CUDA body of the matrix product (contract: cuda_ops.hpp): cuBLAS does the
// product (bf16 inputs, fp32 accumulation); the only kernel here is the
// float -> bf16 conversion, with elementwise.hpp's rounding.
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::cuda {

namespace {

__global__ void to_bf16_kernel(const float* x, std::size_t count, std::uint16_t* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = elementwise::bf16_bits(x[i]);
}

}  // namespace

CublasContext::CublasContext() {
  cublasHandle_t handle = nullptr;
  check_cublas(cublasCreate(&handle), "create");
  handle_ = handle;
}

CublasContext::~CublasContext() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void to_bf16(const float* x, std::size_t count, std::uint16_t* out, void* stream) {
  if (count == 0) return;
  to_bf16_kernel<<<blocks_for(count), kThreadsPerBlock, 0, as_stream(stream)>>>(x, count, out);
  check_launch("to_bf16");
}

void matmul_bf16(const CublasContext& cublas, const std::uint16_t* x, std::size_t ld_x, int rows, int inputs,
                 const std::uint16_t* w, int outputs, float* y, std::size_t ld_y, void* stream) {
  if (rows < 0 || inputs <= 0 || outputs <= 0 || ld_x < static_cast<std::size_t>(inputs) ||
      ld_y < static_cast<std::size_t>(outputs)) {
    throw std::invalid_argument("matmul (cuda): " + std::to_string(rows) + " rows x " + std::to_string(inputs) +
                                " inputs -> " + std::to_string(outputs) + " outputs, strides " +
                                std::to_string(ld_x) + ", " + std::to_string(ld_y));
  }
  if (rows == 0) return;
  const auto handle = static_cast<cublasHandle_t>(cublas.handle());
  check_cublas(cublasSetStream(handle, as_stream(stream)), "set stream");
  // Row-major x, w, y are column-major x^T, w^T, y^T to cuBLAS, so
  // y^T [outputs x rows] = (w^T)^T [outputs x inputs] . x^T [inputs x rows].
  const float one = 1.0f, zero = 0.0f;
  check_cublas(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, outputs, rows, inputs, &one, w, CUDA_R_16BF, inputs,
                            x, CUDA_R_16BF, static_cast<int>(ld_x), &zero, y, CUDA_R_32F, static_cast<int>(ld_y),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "GemmEx");
}

}  // namespace midtune::engine::cuda
