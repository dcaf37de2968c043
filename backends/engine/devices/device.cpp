#include "backends/engine/devices/device.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backends/engine/ops/rope.hpp"

namespace midtune::engine {

KvForm parse_kv_form(const std::string& name, const std::string& where) {
  if (name == "fp32") return KvForm::fp32;
  if (name == "bf16") return KvForm::bf16;
  throw std::invalid_argument(where + ": '" + name + "' is not one of fp32, bf16");
}

const char* to_string(KvForm form) { return form == KvForm::bf16 ? "bf16" : "fp32"; }

// The model's per-sequence order of ops (Model::attend_sequence without
// hooks): one table where every head shares the scale, else one per query
// head with key slot s reading its first query head's table.
void Device::decode_attention(const DecodeBatch& b) {
  if (b.heads <= 0 || b.kv_heads <= 0 || b.heads % b.kv_heads != 0 || b.head_dim <= 0 || b.rope_dims < 0 ||
      b.rope_dims % 2 != 0 || b.rope_dims > b.head_dim) {
    throw std::invalid_argument("decode_attention: heads " + std::to_string(b.heads) + "/" +
                                std::to_string(b.kv_heads) + ", head_dim " + std::to_string(b.head_dim) +
                                ", rope_dims " + std::to_string(b.rope_dims));
  }
  const int heads = b.heads, pairs = b.rope_dims / 2;
  const std::size_t q_width = static_cast<std::size_t>(heads) * b.head_dim;
  const std::size_t kv_width = static_cast<std::size_t>(b.kv_heads) * b.head_dim;
  int longest = 0;
  for (const DecodeSequence& s : b.sequences) longest = std::max(longest, s.tokens);
  DeviceBuffer<float> tables;
  if (pairs > 0) tables = DeviceBuffer<float>(*this, static_cast<std::size_t>(heads) * longest * b.rope_dims);
  for (const DecodeSequence& s : b.sequences) {
    if (s.kv == nullptr || s.tokens < 0 || s.past < 0 || s.past + s.tokens > s.kv->capacity) {
      throw std::invalid_argument("decode_attention: a sequence's " + std::to_string(s.past) + " + " +
                                  std::to_string(s.tokens) + " tokens do not fit its cache");
    }
    if (s.tokens == 0) continue;
    const int T = s.tokens;
    const bool one_table = std::all_of(s.host_scales, s.host_scales + heads, [&](float v) { return v == s.host_scales[0]; });
    const std::size_t table_size = static_cast<std::size_t>(T) * b.rope_dims;
    const float* qkv = b.qkv + static_cast<std::size_t>(s.row) * b.qkv_ld;
    float* q_rot = b.q_rot + static_cast<std::size_t>(s.row) * b.q_rot_ld;
    if (pairs > 0) {
      ops::rope_tables(op_target(), b.positions + s.row, T, s.scales, one_table ? 1 : heads, b.inverse_frequencies,
                       pairs, tables.data());
    }
    const std::size_t query_stride = one_table ? 0 : table_size;
    const std::size_t key_stride = one_table ? 0 : s.kv->slot_table_stride(heads, table_size);
    cache_values(*s.kv, s.past, qkv + q_width + kv_width, b.qkv_ld, T);
    cache_keys(*s.kv, s.past, qkv + q_width, b.qkv_ld, T, b.rope_dims, b.pairing, tables.data(), key_stride);
    copy_rows(q_rot, b.q_rot_ld * sizeof(float), qkv, b.qkv_ld * sizeof(float), q_width * sizeof(float), T);
    ops::rope_rows(op_target(), q_rot, b.q_rot_ld, T, heads, b.head_dim, b.rope_dims, b.pairing, tables.data(),
                   query_stride);
    attention(q_rot, b.q_rot_ld, *s.kv, T, s.past, heads, b.window, b.scale, b.shaping,
              b.out + static_cast<std::size_t>(s.row) * b.out_ld, b.out_ld, {});
  }
}

}  // namespace midtune::engine
