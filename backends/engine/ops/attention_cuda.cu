// CUDA body of attention.hpp (contract: cuda_ops.hpp) for few queries (a
// decode step). One thread block per (query, head): the query in shared
// memory, the visible keys taken in chunks. Per chunk each warp scores every
// kWarps-th key (its lanes split the head's dimensions, so a key row is read
// whole by one warp), the block finds the chunk's maximum, each key's weight
// is computed once, the running sum and output are rescaled (the running-
// maximum softmax of FlashAttention, without tiling over queries), and each
// warp accumulates its keys' weighted value rows in registers, lane d owning
// dimensions d, d + 32, ...; the warps' partial outputs are summed at the
// end. The CPU bodies take the exact maximum first; the results agree to
// float rounding. decode_attention runs the same kernel for every sequence
// of a decode step at once (the sequence in the grid), after one kernel that
// caches and rotates every sequence's rows: two launches a layer instead of
// five per sequence. A step with too few (query, head) blocks to fill the
// GPU (a small decode batch) splits each query's keys over several blocks
// and merges their partial outputs by their log-sum-exps in a third launch
// (flash-decoding; the parts and the merge in decode_split.hpp, checked on
// the host by tests/engine/decode_split_test.cpp).
// Every kernel is templated over the cache's element
// (kv_element.cuh: fp32, or bf16 read back exactly); the arithmetic is fp32.
#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/cuda_reduce.cuh"
#include "backends/engine/ops/decode_split.hpp"
#include "backends/engine/ops/flash_attention_tiles.hpp"
#include "backends/engine/ops/kv_element.cuh"

namespace midtune::engine::cuda {

namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kKeyChunk = 1024;
constexpr int kWarpSize = 32;
constexpr int kWarps = 8;
constexpr int kAttentionThreads = kWarps * kWarpSize;
constexpr int kDimsPerLane = kMaxHeadDim / kWarpSize;

__device__ float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Query t, head h of a call (the whole thread block): the body of the
// attention kernels below. Of the query's visible keys it takes part `split`
// of `splits` (equal spans, the last ones empty where there are fewer keys
// than parts; an empty part writes zeros). Returns the log-sum-exp of the
// part's scores (-infinity where empty) to every thread.
template <typename Kv>
__device__ __forceinline__ float attend_query(int t, int h, const float* q, std::size_t q_ld, const Kv* keys,
                                              const Kv* values, std::size_t kv_ld, int tokens, int past, int heads,
                                              int group, int head_dim, int window, float scale,
                                              const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld,
                                              float* key0_weight, float* last_row, float* log_sum_exp, int split = 0,
                                              int splits = 1) {
  __shared__ float query[kMaxHeadDim];
  __shared__ float weights[kKeyChunk];  // a chunk's scores, then its unnormalised weights
  __shared__ float reduce[kAttentionThreads];
  __shared__ float partial_out[kWarps][kMaxHeadDim];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int kv_head = h / group;
  const int limit = flash::key_limit(t, past);
  const decode_split::KeyRange part = decode_split::key_split(flash::key_first(t, past, window), limit, split, splits);
  const int first = part.first, end = part.end;
  const float slope = elementwise::alibi_slope(shaping.max_alibi_bias, h, heads);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) query[d] = q[t * q_ld + static_cast<std::size_t>(h) * head_dim + d];
  __syncthreads();

  const Kv* key_base = keys + static_cast<std::size_t>(kv_head) * head_dim;
  const Kv* value_base = values + static_cast<std::size_t>(kv_head) * head_dim;
  float running_max = -FLT_MAX, running_sum = 0.0f;
  float accumulated[kDimsPerLane] = {};  // this warp's keys, dimensions lane + 32 k
  float score0 = 0.0f;
  const bool keep_row = last_row != nullptr && t == tokens - 1;
  for (int chunk = first; chunk < end; chunk += kKeyChunk) {
    const int n = min(kKeyChunk, end - chunk);
    for (int j = warp; j < n; j += kWarps) {
      const Kv* key = key_base + static_cast<std::size_t>(chunk + j) * kv_ld;
      float dot = 0.0f;
      for (int d = lane; d < head_dim; d += kWarpSize) dot += query[d] * kv_load(key + d);
      dot = warp_sum(dot);
      if (lane == 0) {
        const float score = scale * dot;
        weights[j] = shaping.on() ? elementwise::shape_score(score, shaping.softcap, slope, limit - 1 - (chunk + j))
                                  : score;
      }
    }
    __syncthreads();
    float chunk_max = -FLT_MAX;
    for (int j = threadIdx.x; j < n; j += blockDim.x) chunk_max = fmaxf(chunk_max, weights[j]);
    chunk_max = block_reduce(chunk_max, reduce, MaxOf{});
    if (chunk == 0) score0 = weights[0];
    const float new_max = fmaxf(running_max, chunk_max);
    const float rescale = expf(running_max - new_max);
    float partial = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      if (keep_row) last_row[static_cast<std::size_t>(h) * limit + chunk + j] = weights[j];
      const float w = expf(weights[j] - new_max);
      weights[j] = w;
      partial += w;
    }
    running_sum = running_sum * rescale + block_reduce(partial, reduce, SumOf{});  // also publishes weights[]
    for (int k = 0; k < kDimsPerLane; ++k) accumulated[k] *= rescale;
    for (int j = warp; j < n; j += kWarps) {
      const float w = weights[j];
      const Kv* value = value_base + static_cast<std::size_t>(chunk + j) * kv_ld;
      for (int k = 0; k < kDimsPerLane; ++k) {
        const int d = lane + k * kWarpSize;
        if (d < head_dim) accumulated[k] += w * kv_load(value + d);
      }
    }
    running_max = new_max;
    __syncthreads();  // weights[] is rewritten by the next chunk
  }
  for (int k = 0; k < kDimsPerLane; ++k) {
    const int d = lane + k * kWarpSize;
    if (d < head_dim) partial_out[warp][d] = accumulated[k];
  }
  __syncthreads();
  const float inverse = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;  // 0: an empty part
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += partial_out[w][d];
    out[t * out_ld + static_cast<std::size_t>(h) * head_dim + d] = sum * inverse;
  }
  if (key0_weight != nullptr && threadIdx.x == 0) {
    key0_weight[static_cast<std::size_t>(h) * tokens + t] = first == 0 ? expf(score0 - running_max) * inverse : 0.0f;
  }
  const float part_log_sum_exp = running_sum > 0.0f ? running_max + logf(running_sum) : -INFINITY;
  if (log_sum_exp != nullptr && threadIdx.x == 0)
    log_sum_exp[static_cast<std::size_t>(h) * tokens + t] = part_log_sum_exp;
  if (keep_row) {
    __syncthreads();  // every thread's raw scores are in last_row
    float* row = last_row + static_cast<std::size_t>(h) * limit;
    for (int j = threadIdx.x; j < limit; j += blockDim.x) row[j] = j < first ? 0.0f : expf(row[j] - running_max) * inverse;
  }
  return part_log_sum_exp;
}

template <typename Kv>
__global__ void attention_kernel(const float* q, std::size_t q_ld, const Kv* keys, const Kv* values, std::size_t kv_ld,
                                 int tokens, int past, int heads, int group, int head_dim, int window, float scale,
                                 elementwise::ScoreShaping shaping, float* out, std::size_t out_ld, float* key0_weight,
                                 float* last_row, float* log_sum_exp) {
  attend_query(blockIdx.x, blockIdx.y, q, q_ld, keys, values, kv_ld, tokens, past, heads, group, head_dim, window,
               scale, shaping, out, out_ld, key0_weight, last_row, log_sum_exp);
}

// ---- decode_attention: the sequences of one launch, passed by value (a
// __grid_constant__ argument is read in place, not copied per thread).
constexpr int kDecodeEntries = 64;
struct DecodeTable {
  DecodeEntry entries[kDecodeEntries];
};

// One thread block per (sequence, token): the query heads rotated into
// q_rot, the keys rotated into each slot of the cache, the values copied.
// A head's work is its rotated pairs, then its dimensions past rope_dims
// (copied). The angles at the sequence's first head's scale are computed once
// per block; a head at another scale (Ms-PoE, per-head slots) computes its
// own, with the same function. Cached keys and values are stored as Kv.
template <typename Kv>
__global__ void decode_cache_kernel(const __grid_constant__ DecodeTable table, const float* qkv, std::size_t qkv_ld,
                                    const double* positions, const double* inverse_frequencies, int pairs,
                                    bool halves, int heads, int kv_heads, int head_dim, float* q_rot,
                                    std::size_t q_rot_ld) {
  __shared__ float common[kMaxHeadDim];  // (cos, sin) per pair
  const DecodeEntry& e = table.entries[blockIdx.x];
  const int t = blockIdx.y;
  if (t >= e.tokens) return;
  const int row = e.row + t;
  const double position = positions[row];
  const float first_scale = pairs > 0 ? e.scales[0] : 1.0f;
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    elementwise::rope_cos_sin(position, first_scale, inverse_frequencies[i], &common[2 * i], &common[2 * i + 1]);
  }
  __syncthreads();
  const int group = heads / kv_heads, rope_dims = 2 * pairs, units = pairs + head_dim - rope_dims;
  const bool per_head = e.slots != kv_heads;
  const float* src = qkv + static_cast<std::size_t>(row) * qkv_ld;
  const float* key_src = src + static_cast<std::size_t>(heads) * head_dim;
  const float* value_src = key_src + static_cast<std::size_t>(kv_heads) * head_dim;
  const std::size_t cache_row = static_cast<std::size_t>(e.past + t) * e.slots * head_dim;
  for (int u = threadIdx.x; u < (heads + e.slots) * units; u += blockDim.x) {
    const int head = u / units, k = u % units;
    const float* in;
    float* query_to = nullptr;  // a query head's row of q_rot, else
    Kv* key_to = nullptr;       // a key slot's row of the cache
    int scale_head;
    if (head < heads) {
      in = src + static_cast<std::size_t>(head) * head_dim;
      query_to = q_rot + static_cast<std::size_t>(row) * q_rot_ld + static_cast<std::size_t>(head) * head_dim;
      scale_head = head;
    } else {
      const int slot = head - heads;
      in = key_src + static_cast<std::size_t>(per_head ? slot / group : slot) * head_dim;
      key_to = static_cast<Kv*>(e.keys) + cache_row + static_cast<std::size_t>(slot) * head_dim;
      scale_head = per_head ? slot : slot * group;
    }
    const auto put = [&](int d, float value) {
      if (query_to != nullptr) {
        query_to[d] = value;
      } else {
        kv_store(key_to + d, value);
      }
    };
    if (k >= pairs) {
      const int d = rope_dims + (k - pairs);
      put(d, in[d]);
      continue;
    }
    const float head_scale = e.scales[scale_head];
    float c = common[2 * k], s = common[2 * k + 1];
    if (head_scale != first_scale) elementwise::rope_cos_sin(position, head_scale, inverse_frequencies[k], &c, &s);
    // adjacent (ggml NORM): (2i, 2i+1); halves (ggml NEOX): (i, i + rope_dims/2).
    const int first = halves ? k : 2 * k, second = halves ? k + pairs : 2 * k + 1;
    float x0, x1;
    elementwise::rope_rotate_pair(in[first], in[second], c, s, &x0, &x1);
    put(first, x0);
    put(second, x1);
  }
  for (int i = threadIdx.x; i < e.slots * head_dim; i += blockDim.x) {
    const int slot = i / head_dim, d = i % head_dim;
    kv_store(static_cast<Kv*>(e.values) + cache_row + i,
             value_src[static_cast<std::size_t>(per_head ? slot / group : slot) * head_dim + d]);
  }
}

// attention_kernel with the sequence in blockIdx.z: one block per (token,
// head, sequence), blocks past a sequence's tokens return at once.
template <typename Kv>
__global__ void decode_attention_kernel(const __grid_constant__ DecodeTable table, int heads, int head_dim,
                                        int window, float scale, elementwise::ScoreShaping shaping,
                                        const float* q_rot, std::size_t q_rot_ld, float* out, std::size_t out_ld) {
  const DecodeEntry& e = table.entries[blockIdx.z];
  const int t = blockIdx.x;
  if (t >= e.tokens) return;
  attend_query(t, blockIdx.y, q_rot + static_cast<std::size_t>(e.row) * q_rot_ld, q_rot_ld,
               static_cast<const Kv*>(e.keys), static_cast<const Kv*>(e.values),
               static_cast<std::size_t>(e.slots) * head_dim, e.tokens, e.past, heads, heads / e.slots, head_dim, window,
               scale, shaping, out + static_cast<std::size_t>(e.row) * out_ld, out_ld, nullptr, nullptr, nullptr);
}

// decode_attention_kernel with each query's keys in `splits` parts, the
// part in blockIdx.x (token t, part s at t * splits + s): each block writes
// its part's normalised output and log-sum-exp to the workspace, laid out
//   partial [n][longest][splits][heads][head_dim], lse [n][splits][heads][longest].
template <typename Kv>
__global__ void decode_split_attention_kernel(const __grid_constant__ DecodeTable table, int heads, int head_dim,
                                              int window, float scale, elementwise::ScoreShaping shaping,
                                              const float* q_rot, std::size_t q_rot_ld, int longest, int splits,
                                              float* partial, float* lse) {
  const int seq = blockIdx.z, t = blockIdx.x / splits, s = blockIdx.x % splits, h = blockIdx.y;
  const DecodeEntry& e = table.entries[seq];
  if (t >= e.tokens) return;
  const std::size_t width = static_cast<std::size_t>(heads) * head_dim;
  float* part_out = partial + (static_cast<std::size_t>(seq) * longest * splits + s) * width;
  const float part_lse =
      attend_query(t, h, q_rot + static_cast<std::size_t>(e.row) * q_rot_ld, q_rot_ld, static_cast<const Kv*>(e.keys),
                   static_cast<const Kv*>(e.values), static_cast<std::size_t>(e.slots) * head_dim, e.tokens, e.past,
                   heads, heads / e.slots, head_dim, window, scale, shaping, part_out, splits * width, nullptr, nullptr,
                   nullptr, s, splits);
  if (threadIdx.x == 0) {
    lse[((static_cast<std::size_t>(seq) * splits + s) * heads + h) * longest + t] = part_lse;
  }
}

// The parts of each (token, head) merged into its output row
// (decode_split::merge_splits). One block per (token, sequence), a thread
// per output element.
__global__ void decode_merge_splits_kernel(const __grid_constant__ DecodeTable table, int heads, int head_dim,
                                           int longest, int splits, const float* partial, const float* lse, float* out,
                                           std::size_t out_ld) {
  const int seq = blockIdx.y, t = blockIdx.x;
  const DecodeEntry& e = table.entries[seq];
  if (t >= e.tokens) return;
  const std::size_t width = static_cast<std::size_t>(heads) * head_dim;
  for (int i = threadIdx.x; i < heads * head_dim; i += blockDim.x) {
    const int h = i / head_dim;
    out[static_cast<std::size_t>(e.row + t) * out_ld + i] = decode_split::merge_splits(
        lse + (static_cast<std::size_t>(seq) * splits * heads + h) * longest + t,
        static_cast<std::size_t>(heads) * longest,
        partial + (static_cast<std::size_t>(seq) * longest + t) * splits * width + i, width, splits);
  }
}

template <typename Kv>
void launch_attention(const float* q, std::size_t q_ld, const Kv* keys, const Kv* values, std::size_t kv_ld, int tokens,
                      int past, int heads, int kv_heads, int head_dim, int window, float scale,
                      const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
                      float* last_row, float* log_sum_exp, void* stream) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("attention (cuda): " + why + " (tokens " + std::to_string(tokens) + ", past " +
                                std::to_string(past) + ", heads " + std::to_string(heads) + "/" +
                                std::to_string(kv_heads) + ", head_dim " + std::to_string(head_dim) + ")");
  };
  if (tokens < 0 || past < 0 || window < 0) fail("negative count");
  if (head_dim <= 0 || head_dim > kMaxHeadDim) fail("head_dim must be 1.." + std::to_string(kMaxHeadDim));
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) fail("heads must be a multiple of kv_heads");
  if (q_ld < static_cast<std::size_t>(heads) * head_dim || out_ld < static_cast<std::size_t>(heads) * head_dim ||
      kv_ld < static_cast<std::size_t>(kv_heads) * head_dim) {
    fail("a row stride is narrower than its heads");
  }
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads));
  attention_kernel<Kv><<<grid, kAttentionThreads, 0, as_stream(stream)>>>(
      q, q_ld, keys, values, kv_ld, tokens, past, heads, heads / kv_heads, head_dim, window, scale, shaping, out,
      out_ld, key0_weight, last_row, log_sum_exp);
  check_launch("attention");
}

template <typename Kv>
void launch_decode(const DecodeTable& table, int n, int longest, const float* qkv, std::size_t qkv_ld,
                   const double* positions, const double* inverse_frequencies, int rope_dims, RopePairing pairing,
                   int heads, int kv_heads, int head_dim, int window, float scale,
                   const elementwise::ScoreShaping& shaping, float* q_rot, std::size_t q_rot_ld, float* out,
                   std::size_t out_ld, int splits, float* workspace, void* stream) {
  decode_cache_kernel<Kv><<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(longest)), kAttentionThreads, 0,
                            as_stream(stream)>>>(table, qkv, qkv_ld, positions, inverse_frequencies, rope_dims / 2,
                                                 pairing == RopePairing::halves, heads, kv_heads, head_dim, q_rot,
                                                 q_rot_ld);
  check_launch("decode cache");
  if (splits <= 1) {
    const dim3 grid(static_cast<unsigned>(longest), static_cast<unsigned>(heads), static_cast<unsigned>(n));
    decode_attention_kernel<Kv><<<grid, kAttentionThreads, 0, as_stream(stream)>>>(
        table, heads, head_dim, window, scale, shaping, q_rot, q_rot_ld, out, out_ld);
    check_launch("decode attention");
    return;
  }
  float* partial = workspace;
  float* lse = workspace + static_cast<std::size_t>(n) * longest * splits * heads * head_dim;
  const dim3 grid(static_cast<unsigned>(longest * splits), static_cast<unsigned>(heads), static_cast<unsigned>(n));
  decode_split_attention_kernel<Kv><<<grid, kAttentionThreads, 0, as_stream(stream)>>>(
      table, heads, head_dim, window, scale, shaping, q_rot, q_rot_ld, longest, splits, partial, lse);
  check_launch("decode split attention");
  decode_merge_splits_kernel<<<dim3(static_cast<unsigned>(longest), static_cast<unsigned>(n)), kAttentionThreads, 0,
                               as_stream(stream)>>>(table, heads, head_dim, longest, splits, partial, lse, out, out_ld);
  check_launch("decode merge splits");
}

}  // namespace

void attention(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld, int tokens,
               int past, int heads, int kv_heads, int head_dim, int window, float scale,
               const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
               float* last_row, float* log_sum_exp, void* stream) {
  launch_attention(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, out,
                   out_ld, key0_weight, last_row, log_sum_exp, stream);
}

void attention(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
               std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
               const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
               float* last_row, float* log_sum_exp, void* stream) {
  launch_attention(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, out,
                   out_ld, key0_weight, last_row, log_sum_exp, stream);
}

void decode_attention(const DecodeEntry* entries, int count, const float* qkv, std::size_t qkv_ld,
                      const double* positions, const double* inverse_frequencies, int rope_dims, RopePairing pairing,
                      int heads, int kv_heads, int head_dim, int window, float scale,
                      const elementwise::ScoreShaping& shaping, float* q_rot, std::size_t q_rot_ld, float* out,
                      std::size_t out_ld, const DecodeSplitting& splitting, void* stream) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("decode attention (cuda): " + why + " (" + std::to_string(count) +
                                " sequences, heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) +
                                ", head_dim " + std::to_string(head_dim) + ", rope_dims " + std::to_string(rope_dims) +
                                ")");
  };
  if (count < 0 || window < 0) fail("negative count");
  if (head_dim <= 0 || head_dim > kMaxHeadDim) fail("head_dim must be 1.." + std::to_string(kMaxHeadDim));
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) fail("heads must be a multiple of kv_heads");
  if (rope_dims < 0 || rope_dims % 2 != 0 || rope_dims > head_dim) fail("rope_dims must be even and <= head_dim");
  if (qkv_ld < static_cast<std::size_t>(heads + 2 * kv_heads) * head_dim ||
      q_rot_ld < static_cast<std::size_t>(heads) * head_dim || out_ld < static_cast<std::size_t>(heads) * head_dim) {
    fail("a row stride is narrower than its heads");
  }
  for (int i = 0; i < count; ++i) {
    const DecodeEntry& e = entries[i];
    if (e.tokens < 0 || e.past < 0 || e.row < 0) fail("sequence " + std::to_string(i) + ": negative count");
    if (e.slots != kv_heads && e.slots != heads) fail("sequence " + std::to_string(i) + ": slots neither KV heads nor heads");
    if (e.bf16 != entries[0].bf16) fail("sequence " + std::to_string(i) + ": a cache of another form (fp32, bf16)");
  }
  for (int first = 0; first < count; first += kDecodeEntries) {
    DecodeTable table{};
    const int n = std::min(kDecodeEntries, count - first);
    int longest = 0, longest_keys = 0;
    for (int i = 0; i < n; ++i) {
      const DecodeEntry& e = table.entries[i] = entries[first + i];
      longest = std::max(longest, e.tokens);
      const int last = e.tokens - 1;  // the sequence's query that sees the most keys
      if (e.tokens > 0) {
        longest_keys = std::max(longest_keys, flash::key_limit(last, e.past) - flash::key_first(last, e.past, window));
      }
    }
    if (longest == 0) continue;
    const int blocks = n * longest * heads;
    const int splits = splitting.workspace == nullptr
                           ? 1
                           : std::min(decode_split::split_count(blocks, longest_keys, splitting.multiprocessors),
                                      splitting.max_splits);
    const std::size_t needed = decode_split::workspace_floats(blocks, splits, head_dim) * sizeof(float);
    if (splits > 1 && needed > splitting.workspace_bytes) {
      fail("a split workspace of " + std::to_string(splitting.workspace_bytes) + " bytes, " + std::to_string(needed) +
           " needed (decode_split_workspace_bytes)");
    }
    const auto launch = entries[0].bf16 ? launch_decode<std::uint16_t> : launch_decode<float>;
    launch(table, n, longest, qkv, qkv_ld, positions, inverse_frequencies, rope_dims, pairing, heads, kv_heads,
           head_dim, window, scale, shaping, q_rot, q_rot_ld, out, out_ld, splits, splitting.workspace, stream);
  }
}

std::size_t decode_split_workspace_bytes(int multiprocessors) {
  return decode_split::largest_workspace_floats(multiprocessors, kMaxHeadDim) * sizeof(float);
}

}  // namespace midtune::engine::cuda
