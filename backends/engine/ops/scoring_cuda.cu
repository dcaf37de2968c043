// CUDA body of scoring.hpp's definitions for whole logit matrices: one
// thread block per row finds the first index of the largest value and, with a
// gold token, log softmax at it (the sum of exponentials in double), so only
// two numbers per row leave the device.
#include <cfloat>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/scoring.hpp"

namespace midtune::engine::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void score_rows_kernel(const float* logits, int vocab, const std::int32_t* gold, std::int32_t* argmax,
                                  double* gold_logprob) {
  __shared__ float best_value[kThreads];
  __shared__ int best_index[kThreads];
  __shared__ double sums[kThreads];
  const float* row = logits + static_cast<std::size_t>(blockIdx.x) * vocab;
  // index == vocab: this thread saw no element yet. Strictly greater: each
  // thread keeps its first maximum (a NaN never replaces a number, and the
  // index stays inside the row whatever the values).
  float value = -FLT_MAX;
  int index = vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (index == vocab || row[i] > value) {
      value = row[i];
      index = i;
    }
  }
  best_value[threadIdx.x] = value;
  best_index[threadIdx.x] = index;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float v = best_value[threadIdx.x + half];
      const int k = best_index[threadIdx.x + half];
      const int mine = best_index[threadIdx.x];
      if (k < vocab && (mine == vocab || v > best_value[threadIdx.x] || (v == best_value[threadIdx.x] && k < mine))) {
        best_value[threadIdx.x] = v;
        best_index[threadIdx.x] = k;
      }
    }
    __syncthreads();
  }
  const float best = best_value[0];
  if (threadIdx.x == 0) argmax[blockIdx.x] = best_index[0];
  if (gold == nullptr) return;
  double sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) sum += exp(static_cast<double>(row[i]) - best);
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    gold_logprob[blockIdx.x] = static_cast<double>(row[gold[blockIdx.x]]) - best - log(sums[0]);
  }
}

}  // namespace

void score_rows(const float* logits, int rows, int vocab, const std::int32_t* gold, std::int32_t* argmax,
                double* gold_logprob, void* stream) {
  if (rows < 0 || vocab <= 0) {
    throw std::invalid_argument("score rows (cuda): " + std::to_string(rows) + " rows of " + std::to_string(vocab));
  }
  if (rows == 0) return;
  score_rows_kernel<<<rows, kThreads, 0, as_stream(stream)>>>(logits, vocab, gold, argmax, gold_logprob);
  check_launch("score rows");
}

}  // namespace midtune::engine::cuda
