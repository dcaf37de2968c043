// GGUF metadata getters and the model configuration read from them.
#include <algorithm>
#include <cmath>
#include <string_view>
#include <limits>
#include <optional>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/gguf/gguf_internal.hpp"

namespace midtune {
using gguf_detail::is_float;
using gguf_detail::is_signed;
using gguf_detail::is_unsigned;
using gguf_detail::kInt64Max;

// ---------------------------------------------------------------- metadata

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

void GgufFile::fail_key(std::string_view key, const std::string& what) const {
  throw GgufError(path_.string() + ": metadata key '" + std::string(key) + "' " + what);
}

const GgufValue& GgufFile::require(std::string_view key) const {
  const GgufValue* value = find(key);
  if (!value) fail_key(key, "is missing");
  return *value;
}

const GgufValue& GgufFile::require_scalar(std::string_view key) const {
  const GgufValue& value = require(key);
  if (value.is_array) fail_key(key, "is " + value.type_name() + ", expected a scalar");
  return value;
}

std::uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue& v = require_scalar(key);
  if (is_unsigned(v.element_type)) return v.unsigned_ints[0];
  if (is_signed(v.element_type)) {
    if (v.signed_ints[0] < 0) fail_key(key, "is negative (" + std::to_string(v.signed_ints[0]) + ")");
    return static_cast<std::uint64_t>(v.signed_ints[0]);
  }
  fail_key(key, "is " + v.type_name() + ", expected an integer");
}

std::int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = require_scalar(key);
  if (is_signed(v.element_type)) return v.signed_ints[0];
  if (is_unsigned(v.element_type)) {
    if (v.unsigned_ints[0] > kInt64Max) fail_key(key, "does not fit in INT64");
    return static_cast<std::int64_t>(v.unsigned_ints[0]);
  }
  fail_key(key, "is " + v.type_name() + ", expected an integer");
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = require_scalar(key);
  if (!is_float(v.element_type)) fail_key(key, "is " + v.type_name() + ", expected FLOAT32 or FLOAT64");
  return v.floats[0];
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = require_scalar(key);
  if (v.element_type != GgufValueType::BOOL) fail_key(key, "is " + v.type_name() + ", expected BOOL");
  return v.unsigned_ints[0] != 0;
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = require_scalar(key);
  if (v.element_type != GgufValueType::STRING) fail_key(key, "is " + v.type_name() + ", expected STRING");
  return v.strings[0];
}

const std::vector<std::string>& GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (!v.is_array || v.element_type != GgufValueType::STRING)
    fail_key(key, "is " + v.type_name() + ", expected ARRAY[STRING]");
  return v.strings;
}

std::vector<std::int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (!v.is_array || !(is_signed(v.element_type) || is_unsigned(v.element_type)))
    fail_key(key, "is " + v.type_name() + ", expected an integer array");
  if (is_signed(v.element_type)) return v.signed_ints;
  std::vector<std::int64_t> out;
  out.reserve(v.unsigned_ints.size());
  for (const auto u : v.unsigned_ints) {
    if (u > kInt64Max) fail_key(key, "has an element that does not fit in INT64");
    out.push_back(static_cast<std::int64_t>(u));
  }
  return out;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (!v.is_array || !is_float(v.element_type)) fail_key(key, "is " + v.type_name() + ", expected a float array");
  return std::vector<float>(v.floats.begin(), v.floats.end());
}

std::uint64_t GgufFile::get_uint_or(std::string_view key, std::uint64_t fallback) const {
  return has(key) ? get_uint(key) : fallback;
}
double GgufFile::get_float_or(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}
std::string GgufFile::get_string_or(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : fallback;
}

// ---------------------------------------------------------------- config

std::uint64_t count_layer_blocks(const GgufFile& file) {
  std::uint64_t count = 0;
  for (const auto& info : file.tensors()) {
    const std::string_view name = info.name;
    if (name.substr(0, 4) != "blk.") continue;
    std::uint64_t index = 0;
    std::size_t i = 4;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && index < (1ull << 40); ++i)
      index = index * 10 + static_cast<std::uint64_t>(name[i] - '0');
    if (i == 4 || i >= name.size() || name[i] != '.') continue;
    count = std::max(count, index + 1);
  }
  return count;
}

ModelConfig read_model_config(const GgufFile& file) {
  ModelConfig c;
  c.arch = file.get_string("general.architecture");
  const std::string p = c.arch + ".";
  // An architecture is llama's forward pass plus the few things it changes
  // (docs/design.md, "A model architecture"); anything else is refused here,
  // before its keys are read.
  if (c.arch == "qwen2") {
    c.rope_pairing = RopePairing::halves;  // llama.cpp: LLAMA_ROPE_TYPE_NEOX
  } else if (c.arch == "gemma") {
    c.rope_pairing = RopePairing::halves;  // llama.cpp: LLAMA_ROPE_TYPE_NEOX
    c.ffn_activation = FfnActivation::gelu_tanh;
  } else if (c.arch == "qwen3") {
    c.rope_pairing = RopePairing::halves;  // llama.cpp: LLAMA_ROPE_TYPE_NEOX
    c.qk_norm = true;
  } else if (c.arch == "gemma2" || c.arch == "gemma3") {
    c.rope_pairing = RopePairing::halves;  // llama.cpp: LLAMA_ROPE_TYPE_NEOX
    c.ffn_activation = FfnActivation::gelu_tanh;
    c.qk_norm = c.arch == "gemma3";
    c.post_norms = true;
  } else if (c.arch == "phi3") {
    c.rope_pairing = RopePairing::halves;  // llama.cpp: LLAMA_ROPE_TYPE_NEOX
    c.fused_gate_up = true;
  } else if (c.arch == "mpt") {
    // ALiBi instead of RoPE, LayerNorm, an ungated GELU FFN (src/models/mpt.cpp).
    c.ffn_activation = FfnActivation::gelu_tanh;
    c.layer_norm = true;
    c.gated_ffn = false;
  } else if (c.arch != "llama") {
    throw GgufError(file.path().string() + ": metadata key 'general.architecture' = '" + c.arch +
                    "' is not supported; supported: " + kSupportedArchitectures);
  }
  const auto u32 = [&](const std::string& key, std::optional<std::uint64_t> fallback = std::nullopt) {
    const std::uint64_t v = fallback ? file.get_uint_or(key, *fallback) : file.get_uint(key);
    if (v == 0 || v > std::numeric_limits<std::uint32_t>::max())
      throw GgufError(file.path().string() + ": metadata key '" + key + "' = " + std::to_string(v) +
                      " is out of range (1..2^32-1)");
    return static_cast<std::uint32_t>(v);
  };
  const auto bad = [&](const std::string& what) { throw GgufError(file.path().string() + ": " + what); };

  c.layers = u32(p + "block_count");
  c.hidden = u32(p + "embedding_length");
  c.ffn = u32(p + "feed_forward_length");
  c.heads = u32(p + "attention.head_count");
  c.kv_heads = u32(p + "attention.head_count_kv", c.heads);
  if (c.heads % c.kv_heads != 0)
    bad("head_count " + std::to_string(c.heads) + " is not a multiple of head_count_kv " + std::to_string(c.kv_heads));
  if (!file.has(p + "attention.key_length") && c.hidden % c.heads != 0)
    bad("embedding_length " + std::to_string(c.hidden) + " is not a multiple of head_count " + std::to_string(c.heads));
  c.head_dim = u32(p + "attention.key_length", c.hidden / c.heads);
  if (file.has(p + "attention.value_length") && file.get_uint(p + "attention.value_length") != c.head_dim)
    bad("attention.value_length differs from key_length (not supported)");
  c.rope_dims = c.arch == "mpt" ? 0 : u32(p + "rope.dimension_count", c.head_dim);
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0)
    bad("rope.dimension_count " + std::to_string(c.rope_dims) + " must be even and at most head_dim " +
        std::to_string(c.head_dim));
  c.rope_base = static_cast<float>(file.get_float_or(p + "rope.freq_base", 10000.0));
  c.rms_eps = static_cast<float>(
      file.get_float(p + (c.layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon")));
  if (!(c.rope_base > 0.0f) || !std::isfinite(c.rope_base)) bad("rope.freq_base must be positive and finite");
  if (!(c.rms_eps > 0.0f) || !std::isfinite(c.rms_eps)) bad("attention.layer_norm_rms_epsilon must be positive and finite");
  c.context_length = u32(p + "context_length");
  if (file.has(p + "vocab_size")) c.vocab = u32(p + "vocab_size");
  else {
    const auto n = file.get_string_array("tokenizer.ggml.tokens").size();
    if (n == 0 || n > std::numeric_limits<std::uint32_t>::max()) bad("tokenizer.ggml.tokens has no usable length");
    c.vocab = static_cast<std::uint32_t>(n);
  }
  if (file.has("tokenizer.ggml.tokens")) {
    // Token ids index the embedding's rows, so the vocabulary cannot be longer.
    const auto n = file.get_string_array("tokenizer.ggml.tokens").size();
    if (n > c.vocab)
      bad("tokenizer.ggml.tokens has " + std::to_string(n) + " entries but the model's vocabulary (" + p +
          "vocab_size) is " + std::to_string(c.vocab));
  }
  if (const auto* embd = file.find_tensor("token_embd.weight")) {
    if (embd->dims.size() != 2 || embd->dims[0] != c.hidden || embd->dims[1] != c.vocab)
      bad("token_embd.weight shape does not match embedding_length x vocab");
  }
  c.tied_output = file.find_tensor("output.weight") == nullptr;
  // Gemma scales the embeddings by sqrt(hidden) in float, as llama.cpp's
  // ggml_scale(inpL, sqrtf(n_embd)).
  if (c.arch == "gemma" || c.arch == "gemma2" || c.arch == "gemma3") {
    c.embedding_scale = std::sqrt(static_cast<float>(c.hidden));
  }
  // phi3: llama.cpp reads the window and switches it off ("Phi SWA is
  // currently disabled"); the converter writes Phi-3-mini's 2047 there, so
  // the engine ignores it too and computes what llama.cpp computes.
  if (file.has(p + "attention.sliding_window") && c.arch != "phi3")
    c.sliding_window = u32(p + "attention.sliding_window");
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // A positive, finite float key, or its default where absent.
  const auto positive = [&](const std::string& key, double fallback) {
    const double v = file.get_float_or(p + key, fallback);
    if (!(v > 0.0) || !std::isfinite(v)) bad("metadata key '" + p + key + "' must be positive and finite");
    return static_cast<float>(v);
  };
  if (c.arch == "gemma2" || c.arch == "gemma3") {
    // As llama.cpp (after gemma_pytorch): the 27B (gemma2: 46 layers,
    // gemma3: 62) scales by hidden / heads, every other size by the head
    // dimension.
    if (c.layers == (c.arch == "gemma2" ? 46u : 62u))
      c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.hidden / c.heads));
    // llama.cpp: gemma2 always slides (4096 keys unless set) one layer of
    // every two, its local layers turning RoPE as the global ones
    // (rope.freq_base_swa where set); gemma3 slides only with a window, five
    // layers of every six, the local ones at rope.freq_base_swa (10000
    // unless set) without the linear scaling. The last layer of each period
    // is global; attention.sliding_window_pattern sets the period, or each
    // layer where it is an array.
    const bool gemma2 = c.arch == "gemma2";
    if (gemma2 && c.sliding_window == 0) c.sliding_window = 4096;
    if (c.sliding_window != 0) {
      const std::string pattern_key = p + "attention.sliding_window_pattern";
      const GgufValue* pattern = file.find(pattern_key);
      c.local_layers.resize(c.layers);
      if (pattern != nullptr && pattern->is_array) {
        const std::vector<std::int64_t> local = file.get_int_array(pattern_key);
        if (local.size() != c.layers) bad("metadata key '" + pattern_key + "' needs one entry per layer");
        for (std::uint32_t l = 0; l < c.layers; ++l) c.local_layers[l] = local[l] != 0;
      } else {
        const std::uint64_t period = file.get_uint_or(pattern_key, gemma2 ? 2 : 6);
        for (std::uint32_t l = 0; l < c.layers; ++l) c.local_layers[l] = period == 0 || l % period < period - 1;
      }
      c.rope_base_local = positive("rope.freq_base_swa", gemma2 ? c.rope_base : 10000.0);
    }
    if (gemma2) c.attn_softcap = positive("attn_logit_softcapping", 50.0);
    // gemma2 always caps its logits (30 unless set); gemma3 where the file says.
    if (gemma2 || file.has(p + "final_logit_softcapping")) c.final_softcap = positive("final_logit_softcapping", 30.0);
  }
  if (c.arch == "mpt") {
    // llama.cpp: ALiBi only with a positive max bias; the clamp where set.
    c.max_alibi_bias = static_cast<float>(file.get_float_or(p + "attention.max_alibi_bias", 0.0));
    c.clamp_kqv = static_cast<float>(file.get_float_or(p + "attention.clamp_kqv", 0.0));
    if (!(c.max_alibi_bias >= 0.0f) || !std::isfinite(c.max_alibi_bias))
      bad("metadata key '" + p + "attention.max_alibi_bias' must be finite and >= 0");
    if (!(c.clamp_kqv >= 0.0f) || !std::isfinite(c.clamp_kqv))
      bad("metadata key '" + p + "attention.clamp_kqv' must be finite and >= 0");
  }
  if (c.arch == "phi3") {
    // The 128k variants' LongRoPE: per-pair factors, long or short chosen by
    // the context size asked for, and an attention factor on cos/sin. The
    // engine runs the 4k form (neither) only.
    for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      if (file.find_tensor(name) != nullptr)
        bad(std::string("tensor '") + name + "' (LongRoPE factors of the 128k Phi-3 variants) is not supported "
            "by the engine; the 4k variants run");
    }
    const std::string attn_factor = p + "rope.scaling.attn_factor";
    if (file.has(attn_factor) && file.get_float(attn_factor) != 1.0)
      bad("metadata key '" + attn_factor + "' = " + std::to_string(file.get_float(attn_factor)) +
          " (LongRoPE, the 128k Phi-3 variants) is not supported by the engine; the 4k variants run");
  }
  // Linear RoPE scaling (e.g. long-context Vicuna) multiplies every angle by
  // 1 / factor, as llama.cpp's freq_scale; other scaling types change the
  // angles per dimension and are refused rather than run wrong.
  const std::string scaling = file.get_string_or(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    const double factor = file.get_float(p + "rope.scaling.factor");
    if (!(factor > 0.0) || !std::isfinite(factor)) bad("rope.scaling.factor must be positive and finite");
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
    if (c.arch == "gemma2") c.rope_freq_scale_local = c.rope_freq_scale;  // llama.cpp: freq_scale_train_swa
  } else if (scaling != "none") {
    bad("metadata key '" + p + "rope.scaling.type' = '" + scaling + "' is not supported (supported: none, linear)");
  }
  return c;
}

}  // namespace midtune
