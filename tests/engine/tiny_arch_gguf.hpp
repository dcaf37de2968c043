// Small random-weight GGUFs of every architecture the engine runs, each with
// its special features switched on and a real vocabulary copied from
// llama.cpp's vocabulary-only files (scripts/fetch_vocabs.sh fills
// MIDTUNE_VOCAB_DIR):
//   qwen2     Q/K/V biases, NEOX RoPE, base 1e6, the qwen2 vocabulary and
//             its ChatML template, tied output
//   llama3    rope_freqs.weight frequency factors (Llama-3.1 scaling), base
//             5e5, GQA, the llama-bpe vocabulary, a Llama-3 chat template
//   gemma     head dimension 256 from key_length/value_length (hidden 128),
//             GeGLU, embeddings x sqrt(hidden), one KV head, NEOX RoPE, tied
//             output, the llama-spm vocabulary (no Gemma-1 vocabulary file
//             exists there) and a Gemma chat template
//   llama_swa a sliding attention window of 8 keys, linear RoPE scaling x2,
//             a separate output matrix, the llama-spm vocabulary
//   qwen3     per-head Q/K RMSNorm, head dimension 32 from key_length (not
//             hidden / heads, as Qwen3's 128 is not), NEOX RoPE, base 1e6,
//             no biases, tied output, the qwen2 vocabulary and its template
//   gemma2    soft-capped attention scores (attn_logit_softcapping 4, low
//             enough to bite on these scores) and logits (final 12), the
//             norms after attention and FFN, a local layer (window 8) and a
//             global one by gemma2's default pattern of 2, head dimension 32
//             from key_length (scale 1/sqrt(32), not 1/sqrt(hidden/heads)),
//             GeGLU, embeddings x sqrt(hidden), the llama-spm vocabulary
//   mpt       ALiBi (max_alibi_bias 8) and no RoPE, LayerNorm with biases,
//             fused Q|K|V with a bias and clamp_kqv 1.5, an ungated GELU FFN
//             with biases, a biased output projection, tied output, no GQA
//             (as MPT), the mpt vocabulary and a ChatML template
//   gemma3    Gemma 2/3's norms after attention and FFN, per-head Q/K norm,
//             a local (window 8, RoPE base 10000 unscaled) and a global
//             layer (base 1e6, linear scaling x8) by a sliding-window
//             pattern of 2, GeGLU, embeddings x sqrt(hidden), one KV head,
//             the llama-spm vocabulary and a Gemma chat template
//   phi3      one fused attn_qkv (Q|K|V rows, GQA as Phi-3-medium's) and one
//             fused ffn_up (gate rows, then up rows), NEOX RoPE, a sliding
//             window of 8 in the metadata that llama.cpp (and so the
//             engine) ignores for phi3, a separate output matrix, the phi-3
//             vocabulary and its chat template
// Weights are F32 from a counter-based generator (splitmix64), so the bytes
// are the same on every machine and compiler: the test writes the files
// itself and compares with logits the numpy reference computed from files
// written by the same code (tests/engine/write_tiny_arch_ggufs.cpp,
// tests/reference/make_arch_fixtures.py).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/engine/gguf/gguf.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"

namespace midtune::testing {

struct TinyArchSpec {
  std::string name;        // file stem and fixture key
  std::string arch;        // general.architecture
  std::string vocab_file;  // in the vocabulary directory
  int hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, ffn = 128, layers = 2;
  float rope_base = 10000.0f, rms_eps = 1e-5f;
  bool write_key_length = false;  // <arch>.attention.key_length / value_length
  bool qkv_bias = false;
  bool qk_norm = false;  // blk.N.attn_q_norm / attn_k_norm.weight
  bool post_norms = false;  // blk.N.post_attention_norm / post_ffw_norm.weight
  std::uint32_t sliding_window_pattern = 0;  // <arch>.attention.sliding_window_pattern (0 = not written)
  bool rope_freqs = false;
  bool fused_qkv = false;      // blk.N.attn_qkv.weight instead of attn_q/k/v
  bool fused_gate_up = false;  // blk.N.ffn_up.weight of 2 x ffn rows (gate, then up), no ffn_gate
  bool tied_output = true;
  std::uint32_t sliding_window = 0;
  float linear_rope_factor = 0.0f;  // 0 = no rope.scaling keys
  std::string chat_template{};      // written when the vocabulary file has none
  float embedding_bound = 0.5f;     // token_embd values in [-b, b)
  float attn_softcap = 0.0f;        // <arch>.attn_logit_softcapping (0 = not written)
  float final_softcap = 0.0f;       // <arch>.final_logit_softcapping (0 = not written)
  // MPT's layout (fused Q|K|V, LayerNorm and biases, ungated FFN, no RoPE
  // keys) and its keys (0 = not written).
  bool mpt = false;
  float max_alibi_bias = 0.0f, clamp_kqv = 0.0f;
};

inline std::vector<TinyArchSpec> tiny_arch_specs() {
  TinyArchSpec qwen2{.name = "qwen2", .arch = "qwen2", .vocab_file = "ggml-vocab-qwen2.gguf"};
  qwen2.rope_base = 1000000.0f;
  qwen2.rms_eps = 1e-6f;
  qwen2.qkv_bias = true;

  TinyArchSpec llama3{.name = "llama3", .arch = "llama", .vocab_file = "ggml-vocab-llama-bpe.gguf"};
  llama3.rope_base = 500000.0f;
  llama3.rope_freqs = true;
  llama3.chat_template =
      "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
      "{{ message['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
      "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

  TinyArchSpec gemma{.name = "gemma", .arch = "gemma", .vocab_file = "ggml-vocab-llama-spm.gguf"};
  gemma.hidden = 128;
  gemma.heads = 2;
  gemma.kv_heads = 1;
  gemma.head_dim = 256;
  gemma.ffn = 256;
  gemma.rms_eps = 1e-6f;
  gemma.write_key_length = true;
  gemma.embedding_bound = 0.15f;  // x sqrt(128) on the way in, as Gemma's small embeddings
  gemma.chat_template =
      "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
      "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}"
      "<start_of_turn>model\n{% endif %}";

  TinyArchSpec swa{.name = "llama_swa", .arch = "llama", .vocab_file = "ggml-vocab-llama-spm.gguf"};
  swa.sliding_window = 8;
  swa.linear_rope_factor = 2.0f;
  swa.tied_output = false;

  TinyArchSpec qwen3{.name = "qwen3", .arch = "qwen3", .vocab_file = "ggml-vocab-qwen2.gguf"};
  qwen3.head_dim = 32;
  qwen3.write_key_length = true;
  qwen3.rope_base = 1000000.0f;
  qwen3.rms_eps = 1e-6f;
  qwen3.qk_norm = true;

  TinyArchSpec gemma3{.name = "gemma3", .arch = "gemma3", .vocab_file = "ggml-vocab-llama-spm.gguf"};
  gemma3.kv_heads = 1;
  gemma3.head_dim = 32;
  gemma3.write_key_length = true;
  gemma3.rope_base = 1000000.0f;
  gemma3.linear_rope_factor = 8.0f;
  gemma3.rms_eps = 1e-6f;
  gemma3.sliding_window = 8;
  gemma3.sliding_window_pattern = 2;  // layer 0 local, layer 1 global (the real files' 6 needs six layers)
  gemma3.qk_norm = true;
  gemma3.post_norms = true;
  gemma3.embedding_bound = 0.15f;  // x sqrt(64) on the way in
  gemma3.chat_template = gemma.chat_template;

  TinyArchSpec phi3{.name = "phi3", .arch = "phi3", .vocab_file = "ggml-vocab-phi-3.gguf"};
  phi3.fused_qkv = true;
  phi3.fused_gate_up = true;
  phi3.sliding_window = 8;  // ignored, as llama.cpp: the prompts run past it
  phi3.tied_output = false;

  TinyArchSpec gemma2{.name = "gemma2", .arch = "gemma2", .vocab_file = "ggml-vocab-llama-spm.gguf"};
  gemma2.head_dim = 32;
  gemma2.write_key_length = true;
  gemma2.rms_eps = 1e-6f;
  gemma2.sliding_window = 8;  // no pattern key: gemma2's default 2, layer 0 local, layer 1 global
  gemma2.post_norms = true;
  gemma2.attn_softcap = 4.0f;
  gemma2.final_softcap = 12.0f;
  gemma2.embedding_bound = 0.15f;
  gemma2.chat_template = gemma.chat_template;

  TinyArchSpec mpt{.name = "mpt", .arch = "mpt", .vocab_file = "ggml-vocab-mpt.gguf"};
  mpt.kv_heads = mpt.heads;
  mpt.mpt = true;
  mpt.max_alibi_bias = 8.0f;
  mpt.clamp_kqv = 1.5f;
  // MPT-7B-Chat's ChatML (the vocabulary file has no template; the engine's
  // experiments wrap prompts in one).
  mpt.chat_template =
      "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  return {qwen2, llama3, gemma, swa, qwen3, gemma3, phi3, gemma2, mpt};
}

// splitmix64 of a counter: the same stream everywhere.
class TinyWeights {
 public:
  explicit TinyWeights(std::uint64_t seed) : state_(seed) {}
  // Uniform in [-bound, bound), in float arithmetic only.
  float next(float bound) {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float unit = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // exact: 24 bits
    return (2.0f * unit - 1.0f) * bound;
  }
  std::vector<std::uint8_t> f32(std::size_t count, float bound, float offset = 0.0f) {
    std::vector<std::uint8_t> out(count * 4);
    for (std::size_t i = 0; i < count; ++i) {
      const float v = offset + next(bound);
      std::memcpy(&out[i * 4], &v, 4);
    }
    return out;
  }

 private:
  std::uint64_t state_;
};

inline std::vector<std::uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<std::uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Every tokenizer.* key of the vocabulary file, as it is there.
inline void copy_tokenizer(const GgufFile& vocab, TinyGgufWriter& w) {
  for (const auto& [key, value] : vocab.metadata()) {
    if (!key.starts_with("tokenizer.")) continue;
    switch (value.element_type) {
      case GgufValueType::STRING:
        if (value.is_array) w.add_string_array(key, value.strings);
        else w.add_string(key, value.strings[0]);
        break;
      case GgufValueType::INT32: {
        std::vector<std::int32_t> v(value.signed_ints.begin(), value.signed_ints.end());
        if (value.is_array) w.add_i32_array(key, v);
        else w.add_i32(key, v[0]);
        break;
      }
      case GgufValueType::FLOAT32: {
        std::vector<float> v(value.floats.begin(), value.floats.end());
        if (value.is_array) w.add_f32_array(key, v);
        else w.add_f32(key, v[0]);
        break;
      }
      case GgufValueType::UINT32:
        if (value.is_array) throw std::runtime_error("copy_tokenizer: unexpected UINT32 array " + key);
        w.add_u32(key, static_cast<std::uint32_t>(value.unsigned_ints[0]));
        break;
      case GgufValueType::BOOL:
        if (value.is_array) throw std::runtime_error("copy_tokenizer: unexpected BOOL array " + key);
        w.add_bool(key, value.unsigned_ints[0] != 0);
        break;
      default:
        throw std::runtime_error("copy_tokenizer: unexpected type of " + key);
    }
  }
}

// Llama-3.1-style frequency factors: 1 for the fastest-turning pairs rising
// to 8 for the slowest (llama.cpp's converter derives them from
// rope_scaling; a linear ramp keeps every pair's factor distinct here).
inline std::vector<float> tiny_rope_freq_factors(int pairs) {
  std::vector<float> f(pairs);
  for (int i = 0; i < pairs; ++i) f[i] = 1.0f + 7.0f * static_cast<float>(i) / static_cast<float>(pairs - 1);
  return f;
}

// The writer, for a test that adds to the file before its bytes are taken.
inline TinyGgufWriter tiny_arch_writer(const TinyArchSpec& s, const GgufFile& vocab) {
  const std::string a = s.arch + ".";
  const std::uint64_t n_vocab = vocab.get_string_array("tokenizer.ggml.tokens").size();
  const std::uint64_t q_rows = static_cast<std::uint64_t>(s.heads) * s.head_dim;
  const std::uint64_t kv_rows = static_cast<std::uint64_t>(s.kv_heads) * s.head_dim;
  const std::uint64_t hidden = s.hidden, ffn = s.ffn;
  TinyGgufWriter w;
  w.add_string("general.architecture", s.arch);
  w.add_string("general.name", "midtune-tiny-" + s.name);
  w.add_u32(a + "block_count", s.layers);
  w.add_u32(a + "context_length", 4096);
  w.add_u32(a + "embedding_length", s.hidden);
  w.add_u32(a + "feed_forward_length", s.ffn);
  w.add_u32(a + "attention.head_count", s.heads);
  w.add_u32(a + "attention.head_count_kv", s.kv_heads);
  if (s.write_key_length) {
    w.add_u32(a + "attention.key_length", s.head_dim);
    w.add_u32(a + "attention.value_length", s.head_dim);
  }
  if (s.mpt) {
    w.add_f32(a + "attention.layer_norm_epsilon", s.rms_eps);
    if (s.max_alibi_bias != 0.0f) w.add_f32(a + "attention.max_alibi_bias", s.max_alibi_bias);
    if (s.clamp_kqv != 0.0f) w.add_f32(a + "attention.clamp_kqv", s.clamp_kqv);
  } else {
    w.add_f32(a + "rope.freq_base", s.rope_base);
    w.add_u32(a + "rope.dimension_count", s.head_dim);
    w.add_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  }
  if (s.attn_softcap != 0.0f) w.add_f32(a + "attn_logit_softcapping", s.attn_softcap);
  if (s.final_softcap != 0.0f) w.add_f32(a + "final_logit_softcapping", s.final_softcap);
  if (s.sliding_window != 0) w.add_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.sliding_window_pattern != 0) w.add_u32(a + "attention.sliding_window_pattern", s.sliding_window_pattern);
  if (s.linear_rope_factor != 0.0f) {
    w.add_string(a + "rope.scaling.type", "linear");
    w.add_f32(a + "rope.scaling.factor", s.linear_rope_factor);
  }
  copy_tokenizer(vocab, w);
  if (!s.chat_template.empty() && !vocab.has("tokenizer.chat_template")) {
    w.add_string("tokenizer.chat_template", s.chat_template);
  }

  // Bounds: uniform [-b, b) has standard deviation b / sqrt(3); matrices get
  // b = sqrt(3 / fan_in) so activations stay of order one.
  const auto bound = [](std::uint64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  TinyWeights rng(0x6d696474756e65ull);
  w.add_tensor("token_embd.weight", {hidden, n_vocab}, 0, rng.f32(hidden * n_vocab, s.embedding_bound));
  w.add_tensor("output_norm.weight", {hidden}, 0, rng.f32(hidden, 0.2f, 1.0f));
  if (s.mpt) w.add_tensor("output_norm.bias", {hidden}, 0, rng.f32(hidden, 0.2f));
  if (!s.tied_output) w.add_tensor("output.weight", {hidden, n_vocab}, 0, rng.f32(hidden * n_vocab, bound(hidden) * 2.0f));
  if (s.rope_freqs) w.add_tensor("rope_freqs.weight", {static_cast<std::uint64_t>(s.head_dim / 2)}, 0,
                                 f32_bytes(tiny_rope_freq_factors(s.head_dim / 2)));
  for (int l = 0; l < s.layers && s.mpt; ++l) {
    // MPT: fused Q|K|V (Q and K a little larger than unit, as below),
    // every norm and product with a bias.
    const std::string p = "blk." + std::to_string(l) + ".";
    const std::uint64_t qkv_rows = q_rows + 2 * kv_rows;
    w.add_tensor(p + "attn_norm.weight", {hidden}, 0, rng.f32(hidden, 0.2f, 1.0f));
    w.add_tensor(p + "attn_norm.bias", {hidden}, 0, rng.f32(hidden, 0.2f));
    std::vector<std::uint8_t> qkv = rng.f32(hidden * (q_rows + kv_rows), bound(hidden) * 2.0f);
    const std::vector<std::uint8_t> v = rng.f32(hidden * kv_rows, bound(hidden));
    qkv.insert(qkv.end(), v.begin(), v.end());
    w.add_tensor(p + "attn_qkv.weight", {hidden, qkv_rows}, 0, qkv);
    w.add_tensor(p + "attn_qkv.bias", {qkv_rows}, 0, rng.f32(qkv_rows, 0.5f));
    w.add_tensor(p + "attn_output.weight", {q_rows, hidden}, 0, rng.f32(q_rows * hidden, bound(q_rows)));
    w.add_tensor(p + "attn_output.bias", {hidden}, 0, rng.f32(hidden, 0.2f));
    w.add_tensor(p + "ffn_norm.weight", {hidden}, 0, rng.f32(hidden, 0.2f, 1.0f));
    w.add_tensor(p + "ffn_norm.bias", {hidden}, 0, rng.f32(hidden, 0.2f));
    w.add_tensor(p + "ffn_up.weight", {hidden, ffn}, 0, rng.f32(hidden * ffn, bound(hidden) * 3.0f));
    w.add_tensor(p + "ffn_up.bias", {ffn}, 0, rng.f32(ffn, 0.5f));
    w.add_tensor(p + "ffn_down.weight", {ffn, hidden}, 0, rng.f32(ffn * hidden, bound(ffn)));
    w.add_tensor(p + "ffn_down.bias", {hidden}, 0, rng.f32(hidden, 0.2f));
  }
  for (int l = 0; l < s.layers && !s.mpt; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight", {hidden}, 0, rng.f32(hidden, 0.2f, 1.0f));
    w.add_tensor(p + "ffn_norm.weight", {hidden}, 0, rng.f32(hidden, 0.2f, 1.0f));
    // Q and K a little larger than unit so attention is not uniform; the
    // gate wide enough that SwiGLU and GeGLU differ clearly.
    auto q = rng.f32(hidden * q_rows, bound(hidden) * 2.0f);
    auto k = rng.f32(hidden * kv_rows, bound(hidden) * 2.0f);
    auto v = rng.f32(hidden * kv_rows, bound(hidden));
    if (s.fused_qkv) {
      q.insert(q.end(), k.begin(), k.end());
      q.insert(q.end(), v.begin(), v.end());
      w.add_tensor(p + "attn_qkv.weight", {hidden, q_rows + 2 * kv_rows}, 0, std::move(q));
    } else {
      w.add_tensor(p + "attn_q.weight", {hidden, q_rows}, 0, std::move(q));
      w.add_tensor(p + "attn_k.weight", {hidden, kv_rows}, 0, std::move(k));
      w.add_tensor(p + "attn_v.weight", {hidden, kv_rows}, 0, std::move(v));
    }
    if (s.qkv_bias) {
      w.add_tensor(p + "attn_q.bias", {q_rows}, 0, rng.f32(q_rows, 0.5f));
      w.add_tensor(p + "attn_k.bias", {kv_rows}, 0, rng.f32(kv_rows, 0.5f));
      w.add_tensor(p + "attn_v.bias", {kv_rows}, 0, rng.f32(kv_rows, 0.5f));
    }
    if (s.qk_norm) {
      w.add_tensor(p + "attn_q_norm.weight", {static_cast<std::uint64_t>(s.head_dim)}, 0,
                   rng.f32(s.head_dim, 0.2f, 1.0f));
      w.add_tensor(p + "attn_k_norm.weight", {static_cast<std::uint64_t>(s.head_dim)}, 0,
                   rng.f32(s.head_dim, 0.2f, 1.0f));
    }
    w.add_tensor(p + "attn_output.weight", {q_rows, hidden}, 0, rng.f32(q_rows * hidden, bound(q_rows)));
    auto gate = rng.f32(hidden * ffn, bound(hidden) * 3.0f);
    auto up = rng.f32(hidden * ffn, bound(hidden));
    if (s.fused_gate_up) {
      gate.insert(gate.end(), up.begin(), up.end());
      w.add_tensor(p + "ffn_up.weight", {hidden, 2 * ffn}, 0, std::move(gate));
    } else {
      w.add_tensor(p + "ffn_gate.weight", {hidden, ffn}, 0, std::move(gate));
      w.add_tensor(p + "ffn_up.weight", {hidden, ffn}, 0, std::move(up));
    }
    w.add_tensor(p + "ffn_down.weight", {ffn, hidden}, 0, rng.f32(ffn * hidden, bound(ffn)));
    if (s.post_norms) {
      w.add_tensor(p + "post_attention_norm.weight", {hidden}, 0, rng.f32(hidden, 0.2f, 1.0f));
      w.add_tensor(p + "post_ffw_norm.weight", {hidden}, 0, rng.f32(hidden, 0.2f, 1.0f));
    }
  }
  return w;
}

inline std::vector<std::uint8_t> tiny_arch_gguf(const TinyArchSpec& s, const GgufFile& vocab) {
  return tiny_arch_writer(s, vocab).bytes();
}

}  // namespace midtune::testing
