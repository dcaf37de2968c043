#include "backends/engine/model_loading.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "backends/engine/ops/dequant.hpp"

namespace midtune::engine {

std::string tensor_where(const GgufFile& file, const std::string& name) {
  return file.path().string() + ": tensor '" + name + "'";
}

// The tensor `name` with its dims checked: dims[0] == cols, dims[1] == rows.
const GgufTensorInfo& matrix_tensor(const GgufFile& file, const std::string& name, std::uint64_t cols,
                                    std::uint64_t rows) {
  const GgufTensorInfo& info = file.tensor(name);
  const std::uint64_t got_rows = info.dims.size() > 1 ? info.dims[1] : 1;
  if (info.dims.empty() || info.dims[0] != cols || got_rows != rows || info.n_elements != cols * rows) {
    throw std::invalid_argument(tensor_where(file, name) + ": expected shape [" + std::to_string(cols) +
                                ", " + std::to_string(rows) + "] from the model metadata");
  }
  if (info.type == nullptr) {
    throw std::invalid_argument(tensor_where(file, name) + ": unsupported ggml type " +
                                ggml_type_name(info.type_id));
  }
  file.require_finite(info);  // the forward pass must never meet a NaN weight
  return info;
}

std::vector<float> vector_tensor(const GgufFile& file, const std::string& name, std::uint64_t size) {
  const GgufTensorInfo& info = matrix_tensor(file, name, size, 1);
  std::vector<float> out(size);
  dequantize_row(info.type->type, file.tensor_data(info).data(), out.data(), size);
  return out;
}

std::vector<float> optional_vector_tensor(const GgufFile& file, const std::string& name, std::uint64_t size) {
  return file.find_tensor(name) != nullptr ? vector_tensor(file, name, size) : std::vector<float>();
}

// Q/K/V biases (qwen2), one vector over the packed Q|K|V rows; empty when
// the file has none (a missing one of the three counts as zeros).
std::vector<float> qkv_bias(const GgufFile& file, const std::string& prefix, std::uint64_t q_rows,
                            std::uint64_t kv_rows) {
  const std::string names[3] = {prefix + "attn_q.bias", prefix + "attn_k.bias", prefix + "attn_v.bias"};
  const std::uint64_t rows[3] = {q_rows, kv_rows, kv_rows};
  std::vector<float> bias;
  for (int i = 0; i < 3; ++i) {
    if (file.find_tensor(names[i]) == nullptr) continue;
    bias.assign(q_rows + 2 * kv_rows, 0.0f);
    break;
  }
  if (bias.empty()) return bias;
  std::size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    if (file.find_tensor(names[i]) != nullptr) {
      const std::vector<float> part = vector_tensor(file, names[i], rows[i]);
      std::copy(part.begin(), part.end(), bias.begin() + static_cast<std::ptrdiff_t>(at));
    }
    at += rows[i];
  }
  return bias;
}

// Every tensor of the file is one the forward pass reads: a tensor it would
// silently ignore (an output bias, a QK norm where the architecture has none,
// MoE experts, a gate beside phi3's fused gate|up) means a feature it does
// not run, so the file is refused rather than run wrong. A fused attn_qkv
// replaces attn_q/k/v in any architecture, as llama.cpp's loader takes it.
void require_known_tensors(const GgufFile& file, const ModelConfig& c) {
  static const char* const kGlobal[] = {"token_embd.weight", "output_norm.weight", "output.weight",
                                        "rope_freqs.weight"};
  // A LayerNorm model's (mpt): fused Q|K|V, biases on every norm and
  // product, no gate.
  static const char* const kLayerNormPerLayer[] = {
      "attn_norm.weight",   "attn_norm.bias",   "ffn_norm.weight", "ffn_norm.bias", "attn_qkv.weight", "attn_qkv.bias",
      "attn_output.weight", "attn_output.bias", "ffn_up.weight",   "ffn_up.bias",   "ffn_down.weight", "ffn_down.bias"};
  static const char* const kPerLayer[] = {"attn_norm.weight", "ffn_norm.weight",    "attn_q.weight",   "attn_k.weight",
                                          "attn_v.weight",    "attn_output.weight", "ffn_gate.weight", "ffn_up.weight",
                                          "ffn_down.weight",  "attn_q.bias",        "attn_k.bias",     "attn_v.bias"};
  for (const GgufTensorInfo& info : file.tensors()) {
    const std::string_view name = info.name;
    bool known = std::find(std::begin(kGlobal), std::end(kGlobal), name) != std::end(kGlobal) ||
                 (c.layer_norm && name == "output_norm.bias");
    if (!known && name.starts_with("blk.")) {
      const std::size_t dot = name.find('.', 4);
      const std::string_view rest = dot == std::string_view::npos ? std::string_view() : name.substr(dot + 1);
      known = c.layer_norm
                  ? std::find(std::begin(kLayerNormPerLayer), std::end(kLayerNormPerLayer), rest) !=
                        std::end(kLayerNormPerLayer)
                  : (std::find(std::begin(kPerLayer), std::end(kPerLayer), rest) != std::end(kPerLayer) &&
                     !(c.fused_gate_up && rest == "ffn_gate.weight")) ||
                        rest == "attn_qkv.weight" ||
                        (c.qk_norm && (rest == "attn_q_norm.weight" || rest == "attn_k_norm.weight")) ||
                        (c.post_norms && (rest == "post_attention_norm.weight" || rest == "post_ffw_norm.weight"));
    }
    if (!known) {
      throw std::invalid_argument(tensor_where(file, info.name) + ": not part of the engine's '" + c.arch +
                                  "' forward pass (a feature it does not run)");
    }
  }
}

// Per dimension pair i, the angle per unit of position:
//   base^(-2i / rope_dims) * freq_scale / freq_factor[i]
// freq_factor: the `rope_freqs.weight` tensor (Llama-3.1 scaling), dividing
// the angle exactly as llama.cpp's ggml_rope_ext does with freq_factors;
// freq_scale: linear RoPE scaling. A method's per-(layer, head) scale divides
// the position on top of these (docs/methods.md, "RoPE of the model").
// Local layers (gemma2/3's sliding ones): base rope_base_local, scaling
// rope_freq_scale_local (gemma3's 1 as llama.cpp's rope_freq_scale_train_swa),
// no factors.
std::vector<double> rope_inverse_frequencies(const GgufFile& file, const ModelConfig& c, bool local) {
  const int half = static_cast<int>(c.rope_dims / 2);
  std::vector<double> inv(half);
  const double base = local ? c.rope_base_local : c.rope_base;
  for (int i = 0; i < half; ++i) inv[i] = std::pow(base, -2.0 * i / c.rope_dims);
  if (local) {
    if (c.rope_freq_scale_local != 1.0f) {
      for (double& v : inv) v *= c.rope_freq_scale_local;
    }
    return inv;
  }
  if (c.rope_freq_scale != 1.0f) {
    for (double& v : inv) v *= c.rope_freq_scale;
  }
  if (file.find_tensor("rope_freqs.weight") != nullptr) {
    const std::vector<float> factors = vector_tensor(file, "rope_freqs.weight", static_cast<std::uint64_t>(half));
    for (int i = 0; i < half; ++i) {
      if (!(factors[i] > 0.0f)) {
        throw std::invalid_argument(tensor_where(file, "rope_freqs.weight") + ": factor " + std::to_string(i) +
                                    " = " + std::to_string(factors[i]) + " must be positive");
      }
      inv[i] /= factors[i];
    }
  }
  return inv;
}


void check_model_shape(const GgufFile& file, const ModelConfig& c, std::uint32_t max_head_dim) {
  const std::string path = file.path().string();
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    throw std::invalid_argument(path + ": rope.dimension_count " + std::to_string(c.rope_dims) +
                                " must be even and at most the head dimension " + std::to_string(c.head_dim));
  }
  if (c.head_dim > max_head_dim || c.head_dim % 2 != 0) {
    throw std::invalid_argument(path + ": head dimension " + std::to_string(c.head_dim) +
                                " unsupported (even, at most " + std::to_string(max_head_dim) + ")");
  }
  // Checked before block_count sizes anything: a lying count must not
  // allocate billions of layers.
  if (const std::uint64_t present = count_layer_blocks(file); present != c.layers) {
    throw std::invalid_argument(path + ": metadata key '" + c.arch + ".block_count' = " +
                                std::to_string(c.layers) + " but the file holds tensors for " +
                                std::to_string(present) + " layers");
  }
  require_known_tensors(file, c);
}

}  // namespace midtune::engine
