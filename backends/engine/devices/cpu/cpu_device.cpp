#include "backends/engine/devices/cpu/cpu_device.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "backends/engine/ops/row_parallel.hpp"
#include "backends/engine/ops/aligned_buffer.hpp"
#include "backends/engine/ops/attention.hpp"
#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/matmul.hpp"
#include "backends/engine/ops/quantize_rows.hpp"
#include "backends/engine/ops/rope.hpp"
#include "backends/engine/ops/row_updates.hpp"
#include "backends/engine/ops/weight_matrix.hpp"

namespace midtune::engine {

using row_parallel::for_each_index;

namespace {

// attention() splits a decode step's tiles across threads (three parallel
// steps instead of one) from this many cached keys on: a model with fewer
// key slots than threads otherwise leaves threads idle through the
// attention, while below a few hundred keys the extra parallel steps cost
// more than the idle thread (SmolLM2 decode: slower split at 32 keys, even
// at 128, faster from 512 on).
constexpr int kSplitAttentionKeys = 256;

// One tile's per-query readouts (key 0's weight, the log-sum-exp), kept
// with the tile while it runs and then written to the call's arrays at
// index[r] (h * tokens + t), as the tile's queries are not the call's order.
struct TileReadouts {
  float key0_weight[kAttentionTile];
  float log_sum_exp[kAttentionTile];
  std::size_t index[kAttentionTile];
  void attach(AttentionTile& tile, const AttentionReadouts& call) {
    tile.key0_weight = call.key0_weight != nullptr ? key0_weight : nullptr;
    tile.log_sum_exp = call.log_sum_exp != nullptr ? log_sum_exp : nullptr;
  }
  void scatter(const AttentionTile& tile, const AttentionReadouts& call) const {
    for (int r = 0; r < tile.count; ++r) {
      if (call.key0_weight != nullptr) call.key0_weight[index[r]] = key0_weight[r];
      if (call.log_sum_exp != nullptr) call.log_sum_exp[index[r]] = log_sum_exp[r];
    }
  }
};

struct CpuMatrix final : DeviceMatrix {
  WeightMatrix weights;
  int rows() const override { return weights.rows(); }
  int cols() const override { return weights.cols(); }
  std::size_t bytes() const override { return weights.bytes(); }
};

// Rows dequantised from the mapped file as they are read (no float copy of
// the table).
// The table's rows in the file's own type, copied: the model frees the
// file's bytes once loaded.
struct CpuEmbedding final : DeviceEmbedding {
  GgmlType type{};
  std::vector<std::byte> data;
  std::size_t row_bytes = 0;
  int width = 0;
  std::size_t bytes() const override { return data.size(); }
};

// Keys and values in fp32 (kt, v) or bf16 bits (kt_bf16, v_bf16; the fp32
// buffers stay empty), same layouts.
struct CpuKv final : LayerKv {
  CpuKv(int capacity, int slots, int kv_heads, int head_dim, KvForm form)
      : LayerKv(capacity, slots, kv_heads, head_dim),
        form(form),
        key_capacity((static_cast<std::size_t>(capacity) + kKeyBlock - 1) / kKeyBlock * kKeyBlock) {
    const std::size_t keys = static_cast<std::size_t>(slots) * head_dim * key_capacity;
    const std::size_t values = static_cast<std::size_t>(kv_heads) * capacity * head_dim;
    if (form == KvForm::bf16) {
      kt_bf16.ensure(keys);
      v_bf16.ensure(values);
    } else {
      kt.ensure(keys);
      v.ensure(values);
    }
  }
  KvForm form;
  std::size_t key_capacity;           // capacity rounded up to whole 16-key blocks
  AlignedBuffer<float> kt;            // [slot][key_capacity / 16][head_dim][16], rotated keys
  AlignedBuffer<float> v;             // [kv_head][capacity][head_dim]
  AlignedBuffer<std::uint16_t> kt_bf16, v_bf16;
  std::size_t slot_offset(int slot) const { return static_cast<std::size_t>(slot) * head_dim * key_capacity; }
  std::size_t head_offset(int kv_head) const { return static_cast<std::size_t>(kv_head) * capacity * head_dim; }
  KeyValueView view(int slot) const {
    const std::size_t keys = slot_offset(slot), values = head_offset(kv_head_of_slot(slot));
    KeyValueView view;
    view.v_ld = static_cast<std::size_t>(head_dim);
    view.head_dim = head_dim;
    if (form == KvForm::bf16) {
      view.kt_bf16 = kt_bf16.data() + keys;
      view.v_bf16 = v_bf16.data() + values;
    } else {
      view.kt = kt.data() + keys;
      view.v = v.data() + values;
    }
    return view;
  }
};

}  // namespace

struct CpuDevice::Scratch {
  QuantizedRows activations;                                // int8 rows of the packed matmuls
  tbb::enumerable_thread_specific<AlignedBuffer<float>> attention;  // one tile's scores per thread
  AlignedBuffer<float> split_attention;                     // the split decode path: one tile's scores per job
};

CpuDevice::CpuDevice(Isa isa, bool fp32_weights, KvForm kv_form)
    : isa_(isa), fp32_weights_(fp32_weights), kv_form_(kv_form), scratch_(std::make_unique<Scratch>()) {
  if (!isa_available(isa_)) {
    throw std::invalid_argument(std::string("engine: ISA ") + to_string(isa_) + " not available on this CPU");
  }
}

CpuDevice::~CpuDevice() = default;

std::string CpuDevice::name() const { return std::string("cpu (") + to_string(isa_) + ")"; }

// ---------------------------------------------------------------- weights

std::unique_ptr<DeviceMatrix> CpuDevice::load_matrix(const std::vector<MatrixPart>& parts, int cols) {
  auto matrix = std::make_unique<CpuMatrix>();
  matrix->weights = WeightMatrix::from_parts(parts, cols, fp32_weights_, packed_layout_for(isa_));
  return matrix;
}

std::unique_ptr<DeviceEmbedding> CpuDevice::load_embedding(const MatrixPart& table, int width, std::size_t row_bytes) {
  auto embedding = std::make_unique<CpuEmbedding>();
  embedding->type = table.type;
  const auto* rows = static_cast<const std::byte*>(table.data);
  embedding->data.assign(rows, rows + row_bytes * static_cast<std::size_t>(table.rows));
  embedding->row_bytes = row_bytes;
  embedding->width = width;
  return embedding;
}

// ---------------------------------------------------------------- ops

void CpuDevice::embed(const DeviceEmbedding& table, const std::int32_t* tokens, int count, float scale, float* out) {
  const auto& e = static_cast<const CpuEmbedding&>(table);
  for (int t = 0; t < count; ++t) {
    float* row = out + static_cast<std::size_t>(t) * e.width;
    dequantize_row(e.type, e.data.data() + static_cast<std::size_t>(tokens[t]) * e.row_bytes, row, e.width);
    if (scale != 1.0f) {
      for (int i = 0; i < e.width; ++i) row[i] *= scale;
    }
  }
}

void CpuDevice::matmul(const DeviceMatrix& w, const float* x, std::size_t ld_x, int rows, float* y,
                       std::size_t ld_y) {
  static_cast<const CpuMatrix&>(w).weights.matmul(x, rows, ld_x, y, ld_y, scratch_->activations, isa_);
}

// ---------------------------------------------------------------- KV cache

std::unique_ptr<LayerKv> CpuDevice::make_layer_kv(int capacity, int slots, int kv_heads, int head_dim) {
  return std::make_unique<CpuKv>(capacity, slots, kv_heads, head_dim, kv_form_);
}

void CpuDevice::cache_keys(LayerKv& layer_kv, int start, const float* keys, std::size_t ld, int tokens,
                           int rope_dims, RopePairing pairing, const float* cos_sin, std::size_t slot_table_stride) {
  auto& kv = static_cast<CpuKv&>(layer_kv);
  const int hd = kv.head_dim;
  const RopeFn rope = rope_for(isa_, pairing);
  for_each_index(kv.slots, tokens, [&](int slot) {
    float key[512];
    const float* source = keys + static_cast<std::size_t>(kv.kv_head_of_slot(slot)) * hd;
    const float* table = cos_sin + slot * slot_table_stride;
    const std::size_t offset = kv.slot_offset(slot);
    for (int t = 0; t < tokens; ++t) {
      std::memcpy(key, source + t * ld, sizeof(float) * hd);
      rope(key, table + static_cast<std::size_t>(t) * rope_dims, rope_dims);
      // A bf16 cache rounds the rotated key: RoPE runs in fp32, as in the
      // fp32 cache and on the GPU.
      if (kv.form == KvForm::bf16) {
        std::uint16_t* kt = kv.kt_bf16.data() + offset;
        for (int i = 0; i < hd; ++i) kt[key_offset(start + t, i, hd)] = elementwise::bf16_bits(key[i]);
      } else {
        float* kt = kv.kt.data() + offset;
        for (int i = 0; i < hd; ++i) kt[key_offset(start + t, i, hd)] = key[i];
      }
    }
  });
}

void CpuDevice::cache_values(LayerKv& layer_kv, int start, const float* values, std::size_t ld, int tokens) {
  auto& kv = static_cast<CpuKv&>(layer_kv);
  const std::size_t hd = kv.head_dim, cap = kv.capacity;
  for (int t = 0; t < tokens; ++t) {
    for (int g = 0; g < kv.kv_heads; ++g) {
      const float* row = values + t * ld + g * hd;
      if (kv.form == KvForm::bf16) {
        std::uint16_t* cached = kv.v_bf16.data() + (g * cap + start + t) * hd;
        for (std::size_t i = 0; i < hd; ++i) cached[i] = elementwise::bf16_bits(row[i]);
      } else {
        std::memcpy(kv.v.data() + (g * cap + start + t) * hd, row, sizeof(float) * hd);
      }
    }
  }
}

// Work items: one key slot's query heads x a run of positions, so each key /
// value row loaded serves every query head that reads it.
void CpuDevice::attention(const float* q, std::size_t q_ld, const LayerKv& layer_kv, int tokens, int past, int heads,
                          int window, float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                          const AttentionReadouts& readouts) {
  const auto& kv = static_cast<const CpuKv&>(layer_kv);
  float* const last_row = readouts.last_row;
  const int hd = kv.head_dim;
  const int keys_total = past + tokens;
  const int group = heads / kv.slots;  // query heads per slot
  const int run = std::max(1, kAttentionTile / group);
  const int runs = (tokens + run - 1) / run;
  const AttentionFn attend_tile = attention_for(isa_);
  // Job `job`'s tile: key slot job / runs, run job % runs of positions;
  // readout_index[r]: where query r's per-query readouts go (h * tokens + t).
  const auto make_tile = [&](int job, AttentionTile& tile, std::size_t* readout_index) {
    const int slot = job / runs;
    const int t0 = (job % runs) * run;
    const int t1 = std::min(tokens, t0 + run);
    tile.softcap = shaping.softcap;
    for (int h = slot * group; h < (slot + 1) * group; ++h) {
      for (int t = t0; t < t1; ++t) {
        const int r = tile.count++;
        tile.q[r] = q + t * q_ld + static_cast<std::size_t>(h) * hd;
        tile.out[r] = out + t * out_ld + static_cast<std::size_t>(h) * hd;
        tile.limit[r] = past + t + 1;
        // A sliding window: the query sees its last `window` keys.
        tile.first[r] = window == 0 ? 0 : std::max(0, tile.limit[r] - window);
        readout_index[r] = static_cast<std::size_t>(h) * tokens + t;
        tile.alibi_slope[r] = elementwise::alibi_slope(shaping.max_alibi_bias, h, heads);
        if (last_row != nullptr && t == tokens - 1) {
          tile.probs_out[r] = last_row + static_cast<std::size_t>(h) * keys_total;
        }
      }
    }
    return kv.view(slot);
  };
  const int jobs = kv.slots * runs;
  const AttentionParts* parts = attention_parts_for(isa_);
  const int threads = tbb::this_task_arena::max_concurrency();
  if (parts != nullptr && hd % kKeyBlock == 0 && jobs % threads != 0 && jobs < 2 * threads &&
      keys_total >= kSplitAttentionKeys) {
    // A decode step: too few tiles (3 key slots on 2 threads leave one idle
    // a third of the time) to keep the threads busy over long caches, so
    // the tiles' keys are split, in chunks, for the scores and for p V.
    // Bit-identical to the whole body (ops/attention.hpp).
    struct Job {
      AttentionTile tile;
      KeyValueView kv;
      int max_limit = 0;
      TileReadouts readouts;
    };
    std::vector<Job> tiles(static_cast<std::size_t>(jobs));
    for (int j = 0; j < jobs; ++j) {
      Job& job = tiles[j];
      job.kv = make_tile(j, job.tile, job.readouts.index);
      job.readouts.attach(job.tile, readouts);
      check_attention_args(job.tile, job.kv);
      for (int r = 0; r < job.tile.count; ++r) job.max_limit = std::max(job.max_limit, job.tile.limit[r]);
    }
    // Per job: its scores, then each value chunk's partial sums.
    const int value_chunks = (keys_total + kValueKeyChunk - 1) / kValueKeyChunk;
    const std::size_t scores_per_job = static_cast<std::size_t>(kAttentionTile) * keys_total;
    const std::size_t partial_floats = static_cast<std::size_t>(kAttentionTile) * hd;
    const std::size_t per_job = scores_per_job + value_chunks * partial_floats;
    AlignedBuffer<float>& split = scratch_->split_attention;
    split.ensure(per_job * jobs);
    const auto job_scores = [&](int job) { return split.data() + per_job * job; };
    const auto job_partials = [&](int job) { return job_scores(job) + scores_per_job; };
    constexpr int kKeyChunk = 128;  // a multiple of kKeyBlock
    const int key_chunks = (keys_total + kKeyChunk - 1) / kKeyChunk;
    tbb::parallel_for(0, jobs * key_chunks, [&](int item) {
      Job& job = tiles[item / key_chunks];
      const int k_begin = (item % key_chunks) * kKeyChunk;
      const int k_end = std::min(job.max_limit, k_begin + kKeyChunk);
      if (k_begin >= k_end) return;
      parts->scores(job.tile, job.kv, scale, job_scores(item / key_chunks), job.max_limit, k_begin, k_end);
    });
    const int rows_per_job = tiles[0].tile.count;
    tbb::parallel_for(0, jobs * rows_per_job, [&](int item) {
      Job& job = tiles[item / rows_per_job];
      const int r = item % rows_per_job;
      if (r < job.tile.count) parts->softmax_row(job.tile, r, job_scores(item / rows_per_job), job.max_limit);
    });
    tbb::parallel_for(0, jobs * value_chunks, [&](int item) {
      const int j = item / value_chunks, chunk = item % value_chunks;
      Job& job = tiles[j];
      const int k_begin = chunk * kValueKeyChunk;
      const int k_end = std::min(job.max_limit, k_begin + kValueKeyChunk);
      if (k_begin >= k_end) return;
      parts->values(job.tile, job.kv, job_scores(j), job.max_limit, k_begin, k_end,
                    job_partials(j) + chunk * partial_floats);
    });
    for (int j = 0; j < jobs; ++j) {
      const Job& job = tiles[j];
      const int chunks = (job.max_limit + kValueKeyChunk - 1) / kValueKeyChunk;
      add_value_chunks(job.tile, job_partials(j), chunks, hd, partial_floats);
    }
    for (const Job& job : tiles) job.readouts.scatter(job.tile, readouts);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int>(0, jobs), [&](const tbb::blocked_range<int>& range) {
    AlignedBuffer<float>& scores = scratch_->attention.local();
    scores.ensure(static_cast<std::size_t>(kAttentionTile) * keys_total);
    for (int job = range.begin(); job < range.end(); ++job) {
      AttentionTile tile;
      TileReadouts tile_readouts;
      const KeyValueView view = make_tile(job, tile, tile_readouts.index);
      tile_readouts.attach(tile, readouts);
      engine::attention(attend_tile, tile, view, scale, scores.data());
      tile_readouts.scatter(tile, readouts);
    }
  });
}

void CpuDevice::add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, const LayerKv& layer_kv,
                                    const float* key0_weight, const float* factors) {
  const auto& kv = static_cast<const CpuKv&>(layer_kv);
  const std::size_t hd = kv.head_dim;
  if (kv.form == KvForm::bf16) {
    // Each KV head's key-0 value row widened (exactly) to fp32.
    std::vector<float> v0(kv.kv_heads * hd);
    for (int g = 0; g < kv.kv_heads; ++g) {
      const std::uint16_t* row = kv.v_bf16.data() + kv.head_offset(g);
      for (std::size_t i = 0; i < hd; ++i) v0[g * hd + i] = elementwise::bf16_value(row[i]);
    }
    engine::add_key0_correction(out, out_ld, tokens, heads, heads / kv.kv_heads, kv.head_dim, key0_weight,
                                static_cast<std::size_t>(tokens), factors, v0.data(), hd);
    return;
  }
  engine::add_key0_correction(out, out_ld, tokens, heads, heads / kv.kv_heads, kv.head_dim, key0_weight,
                              static_cast<std::size_t>(tokens), factors, kv.v.data(),
                              static_cast<std::size_t>(kv.capacity) * hd);
}

// ---------------------------------------------------------------- methods' ops

}  // namespace midtune::engine
