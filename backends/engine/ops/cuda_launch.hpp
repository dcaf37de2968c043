// Shared by the CUDA bodies (<op>_cuda.cu): the launch-error check and the
// grid size of a one-thread-per-element launch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace midtune::engine::cuda {

// Throws naming the op when the launch just made (or the stream before it) failed.
inline void check_launch(const char* op) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(op) + " (cuda): " + cudaGetErrorName(status) + ": " +
                             cudaGetErrorString(status));
  }
}

// Throws naming the cuBLAS call and its status.
inline void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS ") + what + ": " + cublasGetStatusName(status) + ": " +
                             cublasGetStatusString(status));
  }
}

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

constexpr int kThreadsPerBlock = 256;

inline unsigned blocks_for(std::size_t elements) {
  return static_cast<unsigned>((elements + kThreadsPerBlock - 1) / kThreadsPerBlock);
}

}  // namespace midtune::engine::cuda
