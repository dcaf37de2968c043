// A tiny random Llama GGUF (2 layers, hidden 64, vocabulary 40) for tests that
// need a whole model without the real one, so they run under ASan+UBSan.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/engine/ops/fp16.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"

namespace midtune::testing {

inline constexpr std::uint32_t kTinyF32 = 0, kTinyQ8_0 = 8, kTinyQ4_1 = 3;
inline constexpr int kTinyHidden = 64, kTinyHeads = 4, kTinyKvHeads = 2, kTinyFfn = 96, kTinyLayers = 2,
                     kTinyVocab = 40;

inline std::vector<std::uint8_t> tiny_f32_bytes(std::size_t count, std::mt19937& rng, float scale,
                                                float offset = 0.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<std::uint8_t> out(count * 4);
  for (std::size_t i = 0; i < count; ++i) {
    const float v = offset + normal(rng);
    std::memcpy(&out[i * 4], &v, 4);
  }
  return out;
}

// Q8_0 / Q4_1 blocks with random quants and small fp16 scales.
inline std::vector<std::uint8_t> tiny_quant_bytes(std::uint32_t type, std::size_t count, std::mt19937& rng) {
  const std::size_t block = type == kTinyQ8_0 ? 34 : 20;
  std::vector<std::uint8_t> out(count / 32 * block);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : out) b = static_cast<std::uint8_t>(byte(rng));
  for (std::size_t off = 0; off < out.size(); off += block) {
    const std::uint16_t d = engine::float_to_fp16(type == kTinyQ8_0 ? 0.002f : 0.02f);
    std::memcpy(&out[off], &d, 2);
    if (type == kTinyQ4_1) {
      const std::uint16_t m = engine::float_to_fp16(-0.15f);
      std::memcpy(&out[off + 2], &m, 2);
    }
  }
  return out;
}

// A SentencePiece vocabulary of kTinyVocab tokens: <unk>, <s>, </s>, the
// letters a..z, "▁" and a few merges.
inline std::vector<std::string> tiny_spm_tokens() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (char c = 'a'; c <= 'z'; ++c) tokens.emplace_back(1, c);
  for (const char* t : {"\xe2\x96\x81", "he", "ll", "lo", "hel", "hello", "wo", "or", "ld", "rl", "\xe2\x96\x81w"})
    tokens.emplace_back(t);
  return tokens;
}

struct TinyLlama {
  std::string arch = "llama";
  std::uint64_t q_rows = kTinyHeads * 16;  // a wrong value makes a shape error
  bool with_tokenizer = false;

  TinyGgufWriter writer() const {
    std::mt19937 rng(42);
    TinyGgufWriter w;
    w.add_string("general.architecture", arch);
    w.add_u32(arch + ".block_count", kTinyLayers);
    w.add_u32(arch + ".context_length", 256);
    w.add_u32(arch + ".embedding_length", kTinyHidden);
    w.add_u32(arch + ".feed_forward_length", kTinyFfn);
    w.add_u32(arch + ".attention.head_count", kTinyHeads);
    w.add_u32(arch + ".attention.head_count_kv", kTinyKvHeads);
    w.add_f32(arch + ".rope.freq_base", 10000.0f);
    w.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_u32(arch + ".vocab_size", kTinyVocab);
    if (with_tokenizer) {
      const auto tokens = tiny_spm_tokens();
      std::vector<std::int32_t> types(tokens.size(), 1);
      types[0] = 2;
      types[1] = types[2] = 3;
      std::vector<float> scores(tokens.size(), -10.0f);
      for (std::size_t i = 29; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i - 28);
      w.add_string("tokenizer.ggml.model", "llama");
      w.add_string_array("tokenizer.ggml.tokens", tokens);
      w.add_i32_array("tokenizer.ggml.token_type", types);
      w.add_f32_array("tokenizer.ggml.scores", scores);
      w.add_u32("tokenizer.ggml.bos_token_id", 1);
      w.add_u32("tokenizer.ggml.eos_token_id", 2);
      w.add_u32("tokenizer.ggml.unknown_token_id", 0);
    }
    w.add_tensor("token_embd.weight", {kTinyHidden, kTinyVocab}, kTinyQ8_0,
                 tiny_quant_bytes(kTinyQ8_0, kTinyHidden * kTinyVocab, rng));
    w.add_tensor("output_norm.weight", {kTinyHidden}, kTinyF32, tiny_f32_bytes(kTinyHidden, rng, 0.1f, 1.0f));
    for (int l = 0; l < kTinyLayers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const std::uint64_t kv_rows = kTinyKvHeads * 16;
      w.add_tensor(p + "attn_norm.weight", {kTinyHidden}, kTinyF32, tiny_f32_bytes(kTinyHidden, rng, 0.1f, 1.0f));
      w.add_tensor(p + "ffn_norm.weight", {kTinyHidden}, kTinyF32, tiny_f32_bytes(kTinyHidden, rng, 0.1f, 1.0f));
      w.add_tensor(p + "attn_q.weight", {kTinyHidden, q_rows}, kTinyQ4_1,
                   tiny_quant_bytes(kTinyQ4_1, kTinyHidden * q_rows, rng));
      w.add_tensor(p + "attn_k.weight", {kTinyHidden, kv_rows}, kTinyQ4_1,
                   tiny_quant_bytes(kTinyQ4_1, kTinyHidden * kv_rows, rng));
      w.add_tensor(p + "attn_v.weight", {kTinyHidden, kv_rows}, kTinyF32,
                   tiny_f32_bytes(kTinyHidden * kv_rows, rng, 0.1f));
      w.add_tensor(p + "attn_output.weight", {kTinyHeads * 16, kTinyHidden}, kTinyQ4_1,
                   tiny_quant_bytes(kTinyQ4_1, kTinyHeads * 16 * kTinyHidden, rng));
      w.add_tensor(p + "ffn_gate.weight", {kTinyHidden, kTinyFfn}, kTinyQ4_1,
                   tiny_quant_bytes(kTinyQ4_1, kTinyHidden * kTinyFfn, rng));
      w.add_tensor(p + "ffn_up.weight", {kTinyHidden, kTinyFfn}, kTinyQ8_0,
                   tiny_quant_bytes(kTinyQ8_0, kTinyHidden * kTinyFfn, rng));
      w.add_tensor(p + "ffn_down.weight", {kTinyFfn, kTinyHidden}, kTinyQ4_1,
                   tiny_quant_bytes(kTinyQ4_1, kTinyFfn * kTinyHidden, rng));
    }
    return w;
  }
  std::vector<std::uint8_t> bytes(TinyGgufWriter::Layout* layout = nullptr) const { return writer().bytes(layout); }
};

}  // namespace midtune::testing
