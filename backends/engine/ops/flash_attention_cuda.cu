// Flash attention for prefill and teacher-forced calls (contract:
// flash_attention_cuda.hpp, cuda_ops.hpp's attention()). FlashAttention-2
// (Dao 2023, Algorithm 1): a thread block takes 128 queries of one head (64
// at head size 256), its 4 warps 32 (16) each; the keys and values its
// queries see stream through shared memory in tiles of kKeyTile keys
// (row_tiles_for, key_tile_for); per tile each warp
// computes S = Q K^T into registers, masks and shapes it, updates its rows'
// running maximum m and sum l (fp32, log2 units: exp2 is the exponential),
// rescales its output accumulator by 2^(m_old - m_new) and adds P V, P the
// tile's weights rounded to fp16. The scores never reach memory: the cuBLAS
// body (attention_gemm_cuda.cu) writes and reads 12 bytes per score.
//
// Tensor cores through mma.sync (m16n8k16, fp16 inputs, fp32 sums), not
// WMMA: mma.sync's fragment layout is documented (PTX ISA, "Matrix Fragments
// for mma.m16n8k16"), so each thread knows which rows and keys its score
// registers hold: the row maxima and sums need only shuffles within the 4
// threads of a row, and S's accumulator registers are already P's A operand
// for P V (FA-2's register reuse). WMMA's fragment layout is unspecified:
// the softmax would round-trip every score tile through shared memory.
//
// fp16, not bf16: the products sum in fp32, so only each element's range
// matters, and fp16 keeps 11 significant bits to bf16's 8 (P in [0, 1] loses
// nothing to fp16's range): replayed on the host (flash_attention_tiles_test,
// head_dim 128, 300 keys) fp16 inputs leave the output 3.1e-4 of its largest
// value from the reference, bf16 ones 2.5e-3. An element beyond +-65504 saturates there, as
// the cuBLAS body rounds its values (queries and keys are projections of a
// normalised row: never seen that large). The cache holds fp32 or bf16: one pass
// first writes the call's keys and values in fp16 to a workspace, per KV
// head [key][D] with zeros past head_dim and past the last key up to whole
// tiles, so each tile is one contiguous block that cp.async copies 16 bytes
// at a time without a bound test, at half the bytes of fp32 (every query
// block rereads its keys: that traffic, not the pass, is what counts).
// Copies overlap the products (FA-2's schedule): a tile's values load while
// its scores are computed, the next tile's keys while P V is.
//
// GQA: query head h reads KV head h / (heads / kv_heads) (blocks of one KV
// group read the same tiles, mostly from L2). Masks: causal limit and
// sliding window per query (flash_attention_tiles.hpp: only tiles on the
// diagonal or the window's edge test keys one by one). Shaping (soft-cap,
// ALiBi) per score as elementwise::shape_score. Readouts: each query's
// weight on key 0 from the same registers (its key-0 score kept, normalised
// with the final m and l); the last query's row by attention() afterwards.
// Queries, keys and values arrive already rotated (RoPE, per-head scales and
// float positions act before attention), as for the other bodies.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/cuda_launch.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/flash_attention_cuda.hpp"
#include "backends/engine/ops/flash_attention_tiles.hpp"
#include "backends/engine/ops/kv_element.cuh"

namespace midtune::engine::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

struct FlashArgs {
  const float* q;
  std::size_t q_ld;
  const __half* keys;    // [kv_head][padded_keys][D], from pack_kv_kernel
  const __half* values;  // the same
  int padded_keys;       // past + tokens rounded up to whole key tiles
  int tokens, past, heads, group, head_dim, window;
  float scale, softcap, max_alibi_bias;
  float* out;
  std::size_t out_ld;
  float* key0_weight;
  bool vec4;  // query rows and heads 16-byte aligned: float4 loads
};

// fp16 of a float, saturated at +-65504 (NaN stays NaN).
__device__ __forceinline__ float saturate(float v) { return isnan(v) ? v : fminf(fmaxf(v, -65504.0f), 65504.0f); }

__device__ __forceinline__ std::uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);  // .x (lo) in the low 16 bits
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

// D (16x8, fp32) += A (16x16, fp16, row) . B (16x8, fp16, col). Thread lane
// = 4 g + c (g the group, c its index in it) holds, per the PTX ISA:
// a[0] = A[g][2c, 2c+1], a[1] = A[g+8][2c, 2c+1], a[2] = A[g][2c+8, 2c+9],
// a[3] = A[g+8][2c+8, 2c+9]; b0 = B[2c, 2c+1][g], b1 = B[2c+8, 2c+9][g];
// d[0], d[1] = D[g][2c, 2c+1], d[2], d[3] = D[g+8][2c, 2c+1].
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 fp16 matrices from shared memory, transposed: lanes 8i..8i+7 give
// the rows of matrix i; lane 4 g + c receives column g, rows 2c and 2c+1 of
// each: from row-major V (keys x dims) exactly mma's b0 / b1 of P V.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const __half* row) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// 16 bytes global -> shared without passing through registers (sm_80's
// cp.async; .cg: around L1, the tiles are reread from L2 by other blocks).
__device__ __forceinline__ void copy_16_async(void* shared_dst, const void* global_src) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(global_src) : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// One tile of kKeyTile fp16 rows of D (contiguous in the workspace) into
// shared memory rows D + 8 apart, asynchronously.
template <int D, int kKeyTile>
__device__ __forceinline__ void copy_tile_async(__half* dst, const __half* src) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  #pragma unroll 1
  for (int i = threadIdx.x; i < kKeyTile * kChunks; i += kThreads) {
    const int r = i / kChunks, d = (i % kChunks) * 8;
    copy_16_async(dst + r * (D + 8) + d, src + static_cast<std::size_t>(r) * D + d);
  }
}

// rows x D fp16 into shared memory (rows D + 8 apart: the 16-byte pad puts
// the 8 rows an mma fragment or ldmatrix reads on distinct banks) from the
// fp32 rows row_of(r) (nullptr: zeros), dims past head_dim zero.
template <int D, typename RowOf>
__device__ __forceinline__ void stage_rows(__half* dst, int rows, int head_dim, bool vec4, RowOf row_of) {
  constexpr int kQuads = D / 4, kLd = D + 8;
  for (int i = threadIdx.x; i < rows * kQuads; i += kThreads) {
    const int r = i / kQuads, d = (i % kQuads) * 4;
    const float* src = row_of(r);
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (src != nullptr) {
      if (vec4 && d + 4 <= head_dim) {
        const float4 v = *reinterpret_cast<const float4*>(src + d);
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
      } else {
        for (int e = 0; e < 4; ++e) x[e] = d + e < head_dim ? src[d + e] : 0.0f;
      }
    }
    uint2 packed;
    packed.x = pack_half2(saturate(x[0]), saturate(x[1]));
    packed.y = pack_half2(saturate(x[2]), saturate(x[3]));
    *reinterpret_cast<uint2*>(dst + r * kLd + d) = packed;
  }
}

// A block's queries: kRowTiles m16 tiles per warp.
template <int kRowTiles>
__host__ __device__ constexpr int query_rows() {
  return 16 * kRowTiles * kWarps;
}

template <int D, int kKeyTile, int kRowTiles>
constexpr std::size_t shared_bytes() {
  return (static_cast<std::size_t>(query_rows<kRowTiles>()) + 2 * kKeyTile) * (D + 8) * sizeof(__half);
}

// One block per (query tile, head). D: the padded head size; kKeyTile keys
// per tile; kRowTiles m16 tiles of queries per warp. Two row tiles (FA-2's
// 128 queries a block at D <= 128) make every key and value fragment a warp
// reads from shared memory serve 32 queries, not 16: with one, a warp's
// fragment loads (K, V and the queries' own) take about as many shared
// memory cycles as its mma.sync products, on an H100 more (128 bytes a cycle
// against ~2.7k fp16 FLOP a cycle an SM), and each tile copied from L2
// serves twice the queries. The queries' fragments stay in registers only
// at one row tile and D = 64; else they are reread from shared memory per
// tile (kept, they cost D / 4 registers a thread per row tile). ptxas
// (sm_90): 235 registers at D = 128 with 32-key tiles (64-key tiles: 255
// and spills), 212 at D = 64, 238 at D = 256 with one row tile: 2 blocks an
// SM, no spills. Not yet measured on a GPU: the choice rests on the count
// above and on FA-2's shapes; one row tile with 64-key tiles at D = 128
// (166 registers, 3 blocks an SM) is the alternative to time against it.
template <int D, int kKeyTile, int kRowTiles>
__global__ void __launch_bounds__(kThreads, 2) flash_attention_kernel(const FlashArgs a) {
  static_assert(D % 16 == 0 && kKeyTile % 16 == 0, "whole mma tiles");
  constexpr int kLd = D + 8, kKeySteps = D / 16, kScoreTiles = kKeyTile / 8, kOutTiles = D / 8;
  constexpr int kRows = query_rows<kRowTiles>();
  constexpr bool kQueryInRegisters = kRowTiles == 1 && D <= 64;
  extern __shared__ __align__(16) unsigned char shared[];
  __half* const qs = reinterpret_cast<__half*>(shared);
  __half* const ks = qs + kRows * kLd;
  __half* const vs = ks + kKeyTile * kLd;

  // Heavy (late, causal) query tiles first, so the last wave is short.
  const int t0 = (gridDim.x - 1 - blockIdx.x) * kRows, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int kv_head = h / a.group;
  const float slope = elementwise::alibi_slope(a.max_alibi_bias, h, a.heads);

  stage_rows<D>(qs, kRows, a.head_dim, a.vec4, [&](int r) {
    return a.q + static_cast<std::size_t>(min(t0 + r, a.tokens - 1)) * a.q_ld + static_cast<std::size_t>(h) * a.head_dim;
  });
  __syncthreads();
  // Row tile mt of this warp: block rows warp * 16 kRowTiles + 16 mt + [0, 16).
  const __half* const q_warp = qs + warp * 16 * kRowTiles * kLd;
  const auto q_fragment = [&](int mt, int step, std::uint32_t (&f)[4]) {
    const __half* p = q_warp + (mt * 16 + g) * kLd + step * 16 + 2 * c;
    f[0] = *reinterpret_cast<const std::uint32_t*>(p);
    f[1] = *reinterpret_cast<const std::uint32_t*>(p + 8 * kLd);
    f[2] = *reinterpret_cast<const std::uint32_t*>(p + 8);
    f[3] = *reinterpret_cast<const std::uint32_t*>(p + 8 * kLd + 8);
  };
  std::uint32_t q_regs[kQueryInRegisters ? kKeySteps : 1][4];
  if constexpr (kQueryInRegisters) {
    #pragma unroll
    for (int step = 0; step < kKeySteps; ++step) q_fragment(0, step, q_regs[step]);
  }

  // This thread's rows: g and g + 8 of each of its warp's row tiles, clipped
  // to the last token (rows past it recompute that row and store nothing).
  int t_row[kRowTiles][2];
  #pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt) {
    #pragma unroll
    for (int r = 0; r < 2; ++r) t_row[mt][r] = min(t0 + (warp * kRowTiles + mt) * 16 + g + 8 * r, a.tokens - 1);
  }
  float o[kRowTiles][kOutTiles][4];
  float m[kRowTiles][2], l[kRowTiles][2];
  float key0_score[kRowTiles][2];  // log2 units; -inf: key 0 not seen
  #pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt) {
    #pragma unroll
    for (int n = 0; n < kOutTiles; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    #pragma unroll
    for (int r = 0; r < 2; ++r) m[mt][r] = -INFINITY, l[mt][r] = 0.0f, key0_score[mt][r] = -INFINITY;
  }

  const flash::TileRange tiles = flash::key_tiles(t0, kRows, a.tokens, a.past, a.window, kKeyTile);
  const std::size_t head_offset = static_cast<std::size_t>(kv_head) * a.padded_keys * D;
  const __half* const key_tiles = a.keys + head_offset;
  const __half* const value_tiles = a.values + head_offset;
  const auto tile_at = [&](const __half* base, int j) { return base + static_cast<std::size_t>(j) * kKeyTile * D; };
  copy_tile_async<D, kKeyTile>(ks, tile_at(key_tiles, tiles.begin));
  commit_copies();
  for (int j = tiles.begin; j < tiles.end; ++j) {
    const int k0 = j * kKeyTile;
    // Tile j's keys are in, and every warp is done with the last tile's values.
    wait_copies();
    __syncthreads();
    copy_tile_async<D, kKeyTile>(vs, tile_at(value_tiles, j));
    commit_copies();

    // S = Q K^T: B = K^T (dims x keys, "col"): b0 = K[key 8n + g][2c, 2c+1],
    // each key fragment loaded once for the warp's row tiles.
    float s[kRowTiles][kScoreTiles][4];
    #pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) {
      #pragma unroll
      for (int n = 0; n < kScoreTiles; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
    }
    #pragma unroll
    for (int step = 0; step < kKeySteps; ++step) {
      std::uint32_t qf[kRowTiles][4];
      #pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) {
        if constexpr (kQueryInRegisters) {
          #pragma unroll
          for (int i = 0; i < 4; ++i) qf[mt][i] = q_regs[step][i];
        } else {
          q_fragment(mt, step, qf[mt]);
        }
      }
      #pragma unroll
      for (int n = 0; n < kScoreTiles; ++n) {
        const __half* p = ks + (n * 8 + g) * kLd + step * 16 + 2 * c;
        const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(p);
        const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(p + 8);
        #pragma unroll
        for (int mt = 0; mt < kRowTiles; ++mt) mma_16816(s[mt][n], qf[mt], b0, b1);
      }
    }

    // Scale, shape and mask; element e of s[mt][n] is row e / 2 of row tile
    // mt, key k0 + 8n + 2c + e % 2. Then the online softmax per row.
    const bool masked = flash::tile_needs_mask(j, t0, kRows, a.tokens, a.past, a.window, kKeyTile);
    #pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) {
      float tile_max[2] = {-INFINITY, -INFINITY};
      #pragma unroll
      for (int n = 0; n < kScoreTiles; ++n) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2, key = k0 + n * 8 + 2 * c + e % 2;
          const bool visible = !masked || flash::key_visible(t_row[mt][r], key, a.past, a.window);
          s[mt][n][e] =
              flash::log2_score(s[mt][n][e], a.scale, a.softcap, slope, a.past + t_row[mt][r] - key, visible);
          tile_max[r] = fmaxf(tile_max[r], s[mt][n][e]);
        }
      }
      if (k0 == 0 && c == 0) key0_score[mt][0] = s[mt][0][0], key0_score[mt][1] = s[mt][0][2];
      float base[2];
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        // A row's 4 threads are lanes 4g..4g+3.
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        const flash::Rescale step = flash::online_rescale(m[mt][r], tile_max[r]);
        m[mt][r] = step.m_new;
        base[r] = step.base;
        l[mt][r] *= step.alpha;  // this thread's part of the row sum: summed over the 4 at the end
        #pragma unroll
        for (int n = 0; n < kOutTiles; ++n) o[mt][n][2 * r] *= step.alpha, o[mt][n][2 * r + 1] *= step.alpha;
      }
      #pragma unroll
      for (int n = 0; n < kScoreTiles; ++n) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][n][e] = exp2f(s[mt][n][e] - base[e / 2]);
          l[mt][e / 2] += s[mt][n][e];
        }
      }
    }

    // Tile j's values are in, and every warp is done with its keys: the
    // next tile's keys load during P V.
    wait_copies();
    __syncthreads();
    if (j + 1 < tiles.end) {
      copy_tile_async<D, kKeyTile>(ks, tile_at(key_tiles, j + 1));
      commit_copies();
    }

    // O += P V: P's A fragment of keys [16 kk, 16 kk + 16) is score tiles
    // 2 kk and 2 kk + 1 as they lie; V's b0 / b1 by ldmatrix.trans, two
    // output tiles (16 dims) per load, each for the warp's row tiles.
    #pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      std::uint32_t pf[kRowTiles][4];
      #pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) {
        pf[mt][0] = pack_half2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pf[mt][1] = pack_half2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pf[mt][2] = pack_half2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pf[mt][3] = pack_half2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
      const __half* row = vs + (kk * 16 + (lane & 15)) * kLd + (lane >= 16 ? 8 : 0);
      #pragma unroll
      for (int n = 0; n < kOutTiles; n += 2) {
        std::uint32_t vf[4];
        ldmatrix_x4_trans(vf, row + n * 8);
        #pragma unroll
        for (int mt = 0; mt < kRowTiles; ++mt) {
          mma_16816(o[mt][n], pf[mt], vf[0], vf[1]);
          mma_16816(o[mt][n + 1], pf[mt], vf[2], vf[3]);
        }
      }
    }
  }

  // Normalise and store: rows past the last token store nothing.
  #pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt) {
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
      const int t = t0 + (warp * kRowTiles + mt) * 16 + g + 8 * r;
      if (t >= a.tokens) continue;
      const float inverse = 1.0f / l[mt][r];  // > 0: every query sees its own key
      float* dst = a.out + static_cast<std::size_t>(t) * a.out_ld + static_cast<std::size_t>(h) * a.head_dim;
      #pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        const int d = n * 8 + 2 * c;
        if (d < a.head_dim) dst[d] = o[mt][n][2 * r] * inverse;
        if (d + 1 < a.head_dim) dst[d + 1] = o[mt][n][2 * r + 1] * inverse;
      }
      if (a.key0_weight != nullptr && c == 0) {
        a.key0_weight[static_cast<std::size_t>(h) * a.tokens + t] = exp2f(key0_score[mt][r] - m[mt][r]) * inverse;
      }
    }
  }
}

// The workspace's fp16 keys and values: element (g, key, d) of each is the
// cache's (key, head g, dim d), 0 past head_dim or past the last key.
template <typename Kv>
__global__ void pack_kv_kernel(const Kv* keys, const Kv* values, std::size_t kv_ld, int key_count,
                               int padded_keys, int kv_heads, int head_dim, int padded_dim, __half* keys_out,
                               __half* values_out) {
  const std::size_t per_array = static_cast<std::size_t>(kv_heads) * padded_keys * padded_dim;
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= 2 * per_array) return;
  const bool is_value = i >= per_array;
  const std::size_t e = is_value ? i - per_array : i;
  const int d = static_cast<int>(e % padded_dim);
  const int key = static_cast<int>(e / padded_dim % padded_keys);
  const int g = static_cast<int>(e / padded_dim / padded_keys);
  float v = 0.0f;
  if (key < key_count && d < head_dim) {
    v = kv_load((is_value ? values : keys) + static_cast<std::size_t>(key) * kv_ld +
                static_cast<std::size_t>(g) * head_dim + d);
  }
  (is_value ? values_out : keys_out)[e] = __float2half_rn(saturate(v));
}

template <int D, int kKeyTile, int kRowTiles>
void launch(const FlashArgs& args, cudaStream_t stream) {
  constexpr std::size_t bytes = shared_bytes<D, kKeyTile, kRowTiles>();
  constexpr int rows = query_rows<kRowTiles>();
  // Above 48 KiB a kernel must opt in to its dynamic shared memory (on
  // each device: set at every launch, a host-side attribute write).
  const cudaError_t opted_in =
      cudaFuncSetAttribute(flash_attention_kernel<D, kKeyTile, kRowTiles>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (opted_in != cudaSuccess) {
    throw std::runtime_error(std::string("attention (cuda, flash): shared memory of ") + std::to_string(bytes) +
                             " bytes: " + cudaGetErrorString(opted_in));
  }
  const dim3 grid(static_cast<unsigned>((args.tokens + rows - 1) / rows), static_cast<unsigned>(args.heads));
  flash_attention_kernel<D, kKeyTile, kRowTiles><<<grid, kThreads, bytes, stream>>>(args);
  check_launch("attention (flash)");
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The shapes per padded head size, the largest whose registers fit without
// spilling (flash_attention_kernel's comment): tiles of 32 keys (64 at
// D = 64), two row tiles a warp (one at D = 256, where the output
// accumulator alone takes 128 registers a thread).
constexpr int key_tile_for(int padded_dim) { return padded_dim == 64 ? 64 : 32; }
constexpr int row_tiles_for(int padded_dim) { return padded_dim == 256 ? 1 : 2; }

// Keys of the workspace per KV head: the call's, rounded up to whole tiles.
int padded_keys_for(int key_count, int padded_dim) {
  const int tile = key_tile_for(padded_dim);
  return (key_count + tile - 1) / tile * tile;
}

}  // namespace

std::size_t attention_flash_workspace(int tokens, int past, int kv_heads, int head_dim) {
  const int padded = flash::padded_head_dim(head_dim);
  if (tokens < 0 || past < 0 || kv_heads <= 0 || padded == 0) return 0;
  return 2 * static_cast<std::size_t>(kv_heads) * padded_keys_for(past + tokens, padded) * padded * sizeof(__half);
}

namespace {

// Kv: the cache's element (float, or bf16 bits).
template <typename Kv>
void flash(const float* q, std::size_t q_ld, const Kv* keys, const Kv* values, std::size_t kv_ld, int tokens,
           int past, int heads, int kv_heads, int head_dim, int window, float scale,
           const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
           float* last_row, void* workspace, std::size_t workspace_bytes, void* stream) {
  const int padded = flash::padded_head_dim(head_dim);
  if (tokens < 0 || past < 0 || window < 0 || padded == 0 || heads <= 0 || kv_heads <= 0 ||
      heads % kv_heads != 0 || q_ld < static_cast<std::size_t>(heads) * head_dim ||
      out_ld < static_cast<std::size_t>(heads) * head_dim || kv_ld < static_cast<std::size_t>(kv_heads) * head_dim) {
    throw std::invalid_argument("attention (cuda, flash): tokens " + std::to_string(tokens) + ", past " +
                                std::to_string(past) + ", heads " + std::to_string(heads) + "/" +
                                std::to_string(kv_heads) + ", head_dim " + std::to_string(head_dim) +
                                " (1..256), q_ld " + std::to_string(q_ld) + ", kv_ld " + std::to_string(kv_ld) +
                                ", out_ld " + std::to_string(out_ld));
  }
  if (tokens == 0) return;
  const std::size_t least = attention_flash_workspace(tokens, past, kv_heads, head_dim);
  if (workspace_bytes < least || !aligned16(workspace)) {
    throw std::invalid_argument("attention (cuda, flash): a workspace of " + std::to_string(workspace_bytes) +
                                " bytes (16-byte aligned), the call needs " + std::to_string(least));
  }
  const cudaStream_t s = as_stream(stream);
  const int padded_keys = padded_keys_for(past + tokens, padded);
  auto* const keys_half = static_cast<__half*>(workspace);
  __half* const values_half = keys_half + least / 2 / sizeof(__half);
  pack_kv_kernel<<<blocks_for(least / sizeof(__half)), kThreadsPerBlock, 0, s>>>(
      keys, values, kv_ld, past + tokens, padded_keys, kv_heads, head_dim, padded, keys_half, values_half);
  check_launch("attention (flash) keys and values to fp16");

  FlashArgs args{};
  args.q = q, args.q_ld = q_ld, args.keys = keys_half, args.values = values_half, args.padded_keys = padded_keys;
  args.tokens = tokens, args.past = past, args.heads = heads, args.group = heads / kv_heads;
  args.head_dim = head_dim, args.window = window, args.scale = scale;
  args.softcap = shaping.softcap, args.max_alibi_bias = shaping.max_alibi_bias;
  args.out = out, args.out_ld = out_ld, args.key0_weight = key0_weight;
  args.vec4 = head_dim % 4 == 0 && q_ld % 4 == 0 && aligned16(q);
  if (padded == 64) {
    launch<64, key_tile_for(64), row_tiles_for(64)>(args, s);
  } else if (padded == 128) {
    launch<128, key_tile_for(128), row_tiles_for(128)>(args, s);
  } else {
    launch<256, key_tile_for(256), row_tiles_for(256)>(args, s);
  }
  if (last_row != nullptr) {
    // The last query again, alone: its full row normalised, and its output
    // from the same computation.
    const std::size_t last = static_cast<std::size_t>(tokens) - 1;
    attention(q + last * q_ld, q_ld, keys, values, kv_ld, 1, past + tokens - 1, heads, kv_heads, head_dim, window,
              scale, shaping, out + last * out_ld, out_ld, nullptr, last_row, nullptr, stream);
  }
}

}  // namespace

void attention_flash(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
                     int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
                     const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
                     float* last_row, void* workspace, std::size_t workspace_bytes, void* stream) {
  flash(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, out, out_ld,
        key0_weight, last_row, workspace, workspace_bytes, stream);
}

void attention_flash(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
                     std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window,
                     float scale, const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld,
                     float* key0_weight, float* last_row, void* workspace, std::size_t workspace_bytes,
                     void* stream) {
  flash(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, out, out_ld,
        key0_weight, last_row, workspace, workspace_bytes, stream);
}

}  // namespace midtune::engine::cuda
