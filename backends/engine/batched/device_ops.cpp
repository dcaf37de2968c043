#include "backends/engine/batched/device_ops.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/elementwise.hpp"

namespace midtune::engine::batched {

namespace {

struct Bf16Matrix final : DeviceMatrix {
  DeviceBuffer<std::uint16_t> weights;  // [rows][cols]
  int row_count = 0, col_count = 0;
  int rows() const override { return row_count; }
  int cols() const override { return col_count; }
  std::size_t bytes() const override { return weights.size() * sizeof(std::uint16_t); }
};

struct Fp32Embedding final : DeviceEmbedding {
  DeviceBuffer<float> table;  // [vocab][width], exact rows as the CPU embeds them
  int width = 0;
  std::size_t bytes() const override { return table.size() * sizeof(float); }
};

struct RowMajorKv final : LayerKv {
  RowMajorKv(Device& device, int capacity, int slots, int kv_heads, int head_dim)
      : LayerKv(capacity, slots, kv_heads, head_dim),
        keys(device, static_cast<std::size_t>(capacity) * slots * head_dim),
        values(device, static_cast<std::size_t>(capacity) * slots * head_dim) {}
  std::size_t ld() const { return static_cast<std::size_t>(slots) * head_dim; }
  DeviceBuffer<float> keys;    // [capacity][slots * head_dim], rotated
  DeviceBuffer<float> values;  // [capacity][slots * head_dim]
};

}  // namespace

// Row by row, without a float copy of the whole matrix (a 7B model's is 26
// GB); a BF16 tensor's bits are taken as they are (what dequantising and
// rounding them again would give).
std::unique_ptr<DeviceMatrix> DeviceOps::load_matrix(const std::vector<MatrixPart>& parts, int cols) {
  std::size_t total_rows = 0;
  for (const MatrixPart& part : parts) total_rows += static_cast<std::size_t>(part.rows);
  std::vector<std::uint16_t> all(total_rows * cols);
  std::size_t first_row = 0;
  for (const MatrixPart& part : parts) {
    const std::size_t row_bytes = block_bytes(part.type) * (static_cast<std::size_t>(cols) / block_elements(part.type));
    const auto* data = static_cast<const std::byte*>(part.data);
    std::uint16_t* out = all.data() + first_row * cols;
    if (part.type == GgmlType::BF16) {
      std::memcpy(out, data, static_cast<std::size_t>(part.rows) * cols * sizeof(std::uint16_t));
    } else {
      tbb::parallel_for(tbb::blocked_range<int>(0, part.rows), [&](const tbb::blocked_range<int>& range) {
        std::vector<float> row(static_cast<std::size_t>(cols));
        for (int r = range.begin(); r < range.end(); ++r) {
          dequantize_row(part.type, data + r * row_bytes, row.data(), cols);
          for (int i = 0; i < cols; ++i) out[static_cast<std::size_t>(r) * cols + i] = elementwise::bf16_bits(row[i]);
        }
      });
    }
    first_row += static_cast<std::size_t>(part.rows);
  }
  auto matrix = std::make_unique<Bf16Matrix>();
  matrix->weights = DeviceBuffer<std::uint16_t>(*this, all.size());
  upload(matrix->weights.data(), all.data(), all.size() * sizeof(std::uint16_t));
  matrix->row_count = static_cast<int>(total_rows);
  matrix->col_count = cols;
  return matrix;
}

std::unique_ptr<DeviceEmbedding> DeviceOps::load_embedding(const MatrixPart& table, int width, std::size_t row_bytes) {
  std::vector<float> rows(static_cast<std::size_t>(table.rows) * width);
  const auto* data = static_cast<const std::byte*>(table.data);
  tbb::parallel_for(0, table.rows, [&](int r) {
    dequantize_row(table.type, data + r * row_bytes, rows.data() + static_cast<std::size_t>(r) * width, width);
  });
  auto embedding = std::make_unique<Fp32Embedding>();
  embedding->table = DeviceBuffer<float>(*this, rows.size());
  upload(embedding->table.data(), rows.data(), rows.size() * sizeof(float));
  embedding->width = width;
  return embedding;
}

void DeviceOps::embed(const DeviceEmbedding& table, const std::int32_t* tokens, int count, float scale, float* out) {
  const auto& e = static_cast<const Fp32Embedding&>(table);
  embed_rows(e.table.data(), e.width, tokens, count, scale, out);
}

// Activations rounded to bf16, fp32 sums.
void DeviceOps::matmul(const DeviceMatrix& w, const float* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) {
  const auto& m = static_cast<const Bf16Matrix&>(w);
  const std::size_t cols = static_cast<std::size_t>(m.col_count);
  std::uint16_t* xb = bf16_scratch(static_cast<std::size_t>(rows) * cols);
  if (ld_x == cols) {
    to_bf16(x, rows * cols, xb);
  } else {
    for (int r = 0; r < rows; ++r) to_bf16(x + r * ld_x, cols, xb + r * cols);
  }
  matmul_bf16(xb, cols, rows, m.col_count, m.weights.data(), m.row_count, y, ld_y);
}

DeviceOps::KvRows DeviceOps::rows_of(const LayerKv& layer_kv) {
  const auto& kv = static_cast<const RowMajorKv&>(layer_kv);
  return {kv.keys.data(), kv.values.data()};
}

std::unique_ptr<LayerKv> DeviceOps::make_layer_kv(int capacity, int slots, int kv_heads, int head_dim) {
  return std::make_unique<RowMajorKv>(*this, capacity, slots, kv_heads, head_dim);
}

// `tokens` rows of KV-head columns (rows `ld` apart) into the cache rows
// [start, start + tokens) of `cache`, each slot taking its KV head's
// column (repeated per head where the slots are per head).
void DeviceOps::copy_to_slots(const LayerKv& kv, float* cache, int start, const float* rows, std::size_t ld,
                              int tokens) {
  const std::size_t hd = kv.head_dim, cache_ld = static_cast<std::size_t>(kv.slots) * hd;
  float* dst = cache + static_cast<std::size_t>(start) * cache_ld;
  if (kv.slots == kv.kv_heads) {
    copy_rows(dst, cache_ld * sizeof(float), rows, ld * sizeof(float), cache_ld * sizeof(float), tokens);
    return;
  }
  for (int s = 0; s < kv.slots; ++s) {
    copy_rows(dst + s * hd, cache_ld * sizeof(float), rows + kv.kv_head_of_slot(s) * hd, ld * sizeof(float),
              hd * sizeof(float), tokens);
  }
}

void DeviceOps::cache_keys(LayerKv& layer_kv, int start, const float* keys, std::size_t ld, int tokens, int rope_dims,
                           RopePairing pairing, const float* cos_sin, std::size_t slot_table_stride) {
  auto& kv = static_cast<RowMajorKv&>(layer_kv);
  copy_to_slots(kv, kv.keys.data(), start, keys, ld, tokens);
  rope_rows(kv.keys.data() + static_cast<std::size_t>(start) * kv.ld(), kv.ld(), tokens, kv.slots, kv.head_dim,
            rope_dims, pairing, cos_sin, slot_table_stride);
}

void DeviceOps::cache_values(LayerKv& layer_kv, int start, const float* values, std::size_t ld, int tokens) {
  auto& kv = static_cast<RowMajorKv&>(layer_kv);
  copy_to_slots(kv, kv.values.data(), start, values, ld, tokens);
}

void DeviceOps::attention(const float* q, std::size_t q_ld, const LayerKv& layer_kv, int tokens, int past, int heads,
                          int window, float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                          float* key0_weight, float* last_row) {
  const auto& kv = static_cast<const RowMajorKv&>(layer_kv);
  attention_rows(q, q_ld, kv.keys.data(), kv.values.data(), kv.ld(), tokens, past, heads, kv.slots, kv.head_dim,
                 window, scale, shaping, out, out_ld, key0_weight, last_row);
}

void DeviceOps::add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, const LayerKv& layer_kv,
                                    const float* key0_weight, const float* factors) {
  const auto& kv = static_cast<const RowMajorKv&>(layer_kv);
  add_key0_correction_rows(out, out_ld, tokens, heads, kv.slots, kv.head_dim, key0_weight, factors, kv.values.data(),
                           kv.ld());
}

}  // namespace midtune::engine::batched
