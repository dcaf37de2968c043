#include "backends/engine/devices/device_ops.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "backends/engine/ops/dequant.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "backends/engine/ops/rope.hpp"

namespace midtune::engine::devices {

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
  RowMajorKv(Device& device, KvForm form, int capacity, int slots, int kv_heads, int head_dim)
      : LayerKv(capacity, slots, kv_heads, head_dim),
        form(form),
        keys(device, bytes_of(form, capacity, slots, head_dim)),
        values(device, bytes_of(form, capacity, slots, head_dim)) {}
  static std::size_t bytes_of(KvForm form, int capacity, int slots, int head_dim) {
    return static_cast<std::size_t>(capacity) * slots * head_dim * (form == KvForm::bf16 ? 2 : sizeof(float));
  }
  std::size_t ld() const { return static_cast<std::size_t>(slots) * head_dim; }
  template <typename T>
  T* keys_as() const {
    return reinterpret_cast<T*>(keys.data());
  }
  template <typename T>
  T* values_as() const {
    return reinterpret_cast<T*>(values.data());
  }
  const KvForm form;
  DeviceBuffer<std::byte> keys;    // [capacity][slots * head_dim], rotated; float or bf16 bits by `form`
  DeviceBuffer<std::byte> values;  // [capacity][slots * head_dim]
};

}  // namespace

namespace {

std::size_t row_bytes_of(GgmlType type, int cols) {
  return block_bytes(type) * (static_cast<std::size_t>(cols) / block_elements(type));
}

// bf16 bits of `part`'s rows into out ([rows][cols]), row by row without a
// float copy of the whole matrix (a 7B model's is 26 GB); a BF16 tensor's
// bits are taken as they are (what dequantising and rounding them again
// would give).
void widen_to_bf16(const MatrixPart& part, int cols, std::uint16_t* out) {
  const std::size_t row_bytes = row_bytes_of(part.type, cols);
  const auto* data = static_cast<const std::byte*>(part.data);
  if (part.type == GgmlType::BF16) {
    std::memcpy(out, data, static_cast<std::size_t>(part.rows) * cols * sizeof(std::uint16_t));
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int>(0, part.rows), [&](const tbb::blocked_range<int>& range) {
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (int r = range.begin(); r < range.end(); ++r) {
      dequantize_row(part.type, data + r * row_bytes, row.data(), cols);
      for (int i = 0; i < cols; ++i) out[static_cast<std::size_t>(r) * cols + i] = elementwise::bf16_bits(row[i]);
    }
  });
}

// The `file` form: each part in its own type (a fused Q|K|V may mix Q4_K
// and Q6_K), stacked in the order of the output columns.
struct FilePart {
  GgmlType type;  // a block type, or BF16 for what was widened at load
  int rows = 0;
  std::size_t row_bytes = 0;
  DeviceBuffer<std::uint8_t> blocks;
};

struct FileMatrix final : DeviceMatrix {
  std::vector<FilePart> parts;
  int row_count = 0, col_count = 0;
  int rows() const override { return row_count; }
  int cols() const override { return col_count; }
  std::size_t bytes() const override {
    std::size_t total = 0;
    for (const FilePart& part : parts) total += part.blocks.size();
    return total;
  }
};

}  // namespace

std::string DeviceOps::precision() const {
  std::string products = weight_form_ == WeightForm::file ? "bf16 from file blocks" : "bf16";
  if (kv_form_ == KvForm::bf16) products += ", bf16 KV cache";
  if (prefill_attention_ != PrefillAttention::gemm)
    products += std::string(", ") + to_string(prefill_attention_) + " attention";
  return products;
}

PrefillAttention parse_prefill_attention(const std::string& name, const std::string& where) {
  if (name == "gemm") return PrefillAttention::gemm;
  if (name == "flash") return PrefillAttention::flash;
  if (name == "cudnn") {
#if defined(MIDTUNE_WITH_CUDNN)
    return PrefillAttention::cudnn;
#else
    throw std::invalid_argument(where + ": 'cudnn' needs a build with cuDNN and cudnn-frontend (this one found " +
                                "none when configured: scripts/fetch_cudnn_frontend.sh, then CMake again)");
#endif
  }
  throw std::invalid_argument(where + ": '" + name + "' is not one of gemm, flash, cudnn");
}

const char* to_string(PrefillAttention body) {
  switch (body) {
    case PrefillAttention::flash:
      return "flash";
    case PrefillAttention::cudnn:
      return "cudnn";
    case PrefillAttention::gemm:
      break;
  }
  return "gemm";
}

bool DeviceOps::keeps_blocks(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::BF16:
      return true;
    default:
      return false;
  }
}

std::unique_ptr<DeviceMatrix> DeviceOps::load_matrix(const std::vector<MatrixPart>& parts, int cols) {
  std::size_t total_rows = 0;
  for (const MatrixPart& part : parts) {
    if (cols <= 0 || cols % static_cast<int>(block_elements(part.type)) != 0) {
      throw std::invalid_argument("load_matrix: " + std::to_string(cols) + " columns is not a multiple of the " +
                                  ggml_type_info(part.type).name + " block size " +
                                  std::to_string(block_elements(part.type)));
    }
    total_rows += static_cast<std::size_t>(part.rows);
  }
  if (weight_form_ == WeightForm::file) {
    auto matrix = std::make_unique<FileMatrix>();
    for (const MatrixPart& part : parts) {
      FilePart stored;
      stored.rows = part.rows;
      if (keeps_blocks(part.type)) {
        stored.type = part.type;
        stored.row_bytes = row_bytes_of(part.type, cols);
        stored.blocks = DeviceBuffer<std::uint8_t>(*this, stored.row_bytes * part.rows);
        upload(stored.blocks.data(), part.data, stored.blocks.size());
      } else {
        std::vector<std::uint16_t> wide(static_cast<std::size_t>(part.rows) * cols);
        widen_to_bf16(part, cols, wide.data());
        stored.type = GgmlType::BF16;
        stored.row_bytes = static_cast<std::size_t>(cols) * sizeof(std::uint16_t);
        stored.blocks = DeviceBuffer<std::uint8_t>(*this, wide.size() * sizeof(std::uint16_t));
        upload(stored.blocks.data(), wide.data(), stored.blocks.size());
      }
      matrix->parts.push_back(std::move(stored));
    }
    matrix->row_count = static_cast<int>(total_rows);
    matrix->col_count = cols;
    return matrix;
  }
  std::vector<std::uint16_t> all(total_rows * cols);
  std::size_t first_row = 0;
  for (const MatrixPart& part : parts) {
    widen_to_bf16(part, cols, all.data() + first_row * cols);
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

// Activations rounded to bf16, fp32 sums. A `file` matrix is multiplied
// part by part straight from its blocks for few rows, else dequantised tile
// by tile (whole rows, across its parts) and each tile multiplied into its
// output columns: either way the weights are those of the bf16 form.
void DeviceOps::matmul(const DeviceMatrix& w, const float* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) {
  const std::size_t cols = static_cast<std::size_t>(w.cols());
  std::uint16_t* xb = bf16_scratch(static_cast<std::size_t>(rows) * cols);
  if (ld_x == cols) {
    to_bf16(x, rows * cols, xb);
  } else {
    for (int r = 0; r < rows; ++r) to_bf16(x + r * ld_x, cols, xb + r * cols);
  }
  if (const auto* m = dynamic_cast<const Bf16Matrix*>(&w)) {
    matmul_bf16(xb, cols, rows, m->col_count, m->weights.data(), m->row_count, y, ld_y);
    return;
  }
  const auto& m = static_cast<const FileMatrix&>(w);
  if (rows == 0) return;
  if (m.parts.size() == 1 && m.parts[0].type == GgmlType::BF16) {
    matmul_bf16(xb, cols, rows, m.col_count, reinterpret_cast<const std::uint16_t*>(m.parts[0].blocks.data()),
                m.row_count, y, ld_y);
    return;
  }
  if (rows <= block_gemv_rows_) {
    int part_first = 0;
    for (const FilePart& part : m.parts) {
      if (part.type == GgmlType::BF16) {
        matmul_bf16(xb, cols, rows, m.col_count, reinterpret_cast<const std::uint16_t*>(part.blocks.data()),
                    part.rows, y + part_first, ld_y);
      } else {
        matmul_blocks(part.type, part.blocks.data(), part.row_bytes, part.rows, m.col_count, xb, cols, rows,
                      y + part_first, ld_y);
      }
      part_first += part.rows;
    }
    return;
  }
  const int tile_rows = static_cast<int>(
      std::clamp<std::size_t>(weight_tile_elements_ / cols, 1, static_cast<std::size_t>(m.row_count)));
  std::uint16_t* tile = weight_scratch(static_cast<std::size_t>(tile_rows) * cols);
  for (int start = 0; start < m.row_count; start += tile_rows) {
    const int end = std::min(m.row_count, start + tile_rows);
    int part_first = 0;
    for (const FilePart& part : m.parts) {
      const int lo = std::max(start, part_first), hi = std::min(end, part_first + part.rows);
      if (lo < hi) {
        dequantize_bf16(part.type, part.blocks.data() + static_cast<std::size_t>(lo - part_first) * part.row_bytes,
                        part.row_bytes, hi - lo, m.col_count, tile + static_cast<std::size_t>(lo - start) * cols);
      }
      part_first += part.rows;
    }
    matmul_bf16(xb, cols, rows, m.col_count, tile, end - start, y + start, ld_y);
  }
}

DeviceOps::KvRows DeviceOps::rows_of(const LayerKv& layer_kv) {
  const auto& kv = static_cast<const RowMajorKv&>(layer_kv);
  return {kv.keys.data(), kv.values.data(), kv.form};
}

std::unique_ptr<LayerKv> DeviceOps::make_layer_kv(int capacity, int slots, int kv_heads, int head_dim) {
  return std::make_unique<RowMajorKv>(*this, kv_form_, capacity, slots, kv_heads, head_dim);
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

// A bf16 cache takes its rows as the fp32 cache would hold them (keys
// rotated in fp32), staged in fp32 and rounded once into place.
void DeviceOps::cache_keys(LayerKv& layer_kv, int start, const float* keys, std::size_t ld, int tokens, int rope_dims,
                           RopePairing pairing, const float* cos_sin, std::size_t slot_table_stride) {
  auto& kv = static_cast<RowMajorKv&>(layer_kv);
  const std::size_t first = static_cast<std::size_t>(start) * kv.ld();
  if (kv.form == KvForm::fp32) {
    copy_to_slots(kv, kv.keys_as<float>(), start, keys, ld, tokens);
    ops::rope_rows(op_target(), kv.keys_as<float>() + first, kv.ld(), tokens, kv.slots, kv.head_dim, rope_dims, pairing,
                   cos_sin, slot_table_stride);
    return;
  }
  const std::size_t count = static_cast<std::size_t>(tokens) * kv.ld();
  float* staged = float_scratch(count);
  copy_to_slots(kv, staged, 0, keys, ld, tokens);
  ops::rope_rows(op_target(), staged, kv.ld(), tokens, kv.slots, kv.head_dim, rope_dims, pairing, cos_sin,
                 slot_table_stride);
  to_bf16(staged, count, kv.keys_as<std::uint16_t>() + first);
}

void DeviceOps::cache_values(LayerKv& layer_kv, int start, const float* values, std::size_t ld, int tokens) {
  auto& kv = static_cast<RowMajorKv&>(layer_kv);
  if (kv.form == KvForm::fp32) {
    copy_to_slots(kv, kv.values_as<float>(), start, values, ld, tokens);
    return;
  }
  const std::size_t count = static_cast<std::size_t>(tokens) * kv.ld();
  float* staged = float_scratch(count);
  copy_to_slots(kv, staged, 0, values, ld, tokens);
  to_bf16(staged, count, kv.values_as<std::uint16_t>() + static_cast<std::size_t>(start) * kv.ld());
}

void DeviceOps::attention(const float* q, std::size_t q_ld, const LayerKv& layer_kv, int tokens, int past, int heads,
                          int window, float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                          const AttentionReadouts& readouts) {
  const auto& kv = static_cast<const RowMajorKv&>(layer_kv);
  if (kv.form == KvForm::bf16) {
    attention_rows_bf16(q, q_ld, kv.keys_as<std::uint16_t>(), kv.values_as<std::uint16_t>(), kv.ld(), tokens, past,
                        heads, kv.slots, kv.head_dim, window, scale, shaping, out, out_ld, readouts);
    return;
  }
  attention_rows(q, q_ld, kv.keys_as<float>(), kv.values_as<float>(), kv.ld(), tokens, past, heads, kv.slots,
                 kv.head_dim, window, scale, shaping, out, out_ld, readouts);
}

// Only value row 0 is read: from a bf16 cache, widened first.
void DeviceOps::add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, const LayerKv& layer_kv,
                                    const float* key0_weight, const float* factors) {
  const auto& kv = static_cast<const RowMajorKv&>(layer_kv);
  const float* values = kv.values_as<float>();
  if (kv.form == KvForm::bf16) {
    float* row0 = float_scratch(kv.ld());
    from_bf16(kv.values_as<std::uint16_t>(), kv.ld(), row0);
    values = row0;
  }
  add_key0_correction_rows(out, out_ld, tokens, heads, kv.slots, kv.head_dim, key0_weight, factors, values, kv.ld());
}

}  // namespace midtune::engine::devices
