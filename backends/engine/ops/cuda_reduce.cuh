// A thread block's reduction, shared by the CUDA bodies: every thread passes
// its value, every thread gets the block's result. `shared` holds blockDim.x
// values (blockDim.x a power of two); the closing barrier lets the caller
// reuse it at once.
#pragma once

namespace midtune::engine::cuda {

template <typename T, typename Combine>
__device__ T block_reduce(T value, T* shared, Combine combine) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  const T result = shared[0];
  __syncthreads();
  return result;
}

// A warp's sum: every lane passes its value, every lane gets the sum (all
// 32 lanes must call it).
__device__ inline float warp_sum(float value) {
  for (int mask = 16; mask > 0; mask /= 2) value += __shfl_xor_sync(0xffffffffu, value, mask);
  return value;
}

// fmax: a NaN never wins over a number.
struct MaxOf {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

struct SumOf {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

}  // namespace midtune::engine::cuda
