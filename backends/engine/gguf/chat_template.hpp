// Chat templates: ChatML (SmolLM2, Qwen, Qwen3), Llama-2 / Mistral [INST],
// Llama-3 header tokens, Phi-3's <|user|>/<|end|>, Gemma turns and Vicuna's
// USER:/ASSISTANT:, chosen from the
// GGUF's tokenizer.chat_template text as llama.cpp chooses. Renders a
// single user message followed by the assistant generation prompt, as the
// model's own Jinja template does with add_generation_prompt=True, and says
// where the user content sits so datasets can shift chunk byte spans.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace midtune {

class GgufFile;

enum class ChatFormat { chatml, llama2, llama3, gemma, vicuna, phi3 };
const char* to_string(ChatFormat format);

struct RenderedPrompt {
  std::string text;
  // The user content is text[content_begin, content_end), byte for byte
  // (never trimmed), so a chunk at bytes [b, e) of the content sits at
  // [content_begin + b, content_begin + e) of the prompt.
  std::size_t content_begin = 0;
  std::size_t content_end = 0;
};

class ChatTemplate {
 public:
  ChatTemplate(ChatFormat format, std::optional<std::string> default_system = std::nullopt);

  // By the markers llama.cpp tests, in its order: <|im_start|> ChatML, [INST]
  // Llama-2, <|assistant|> with <|end|> Phi-3, <start_of_turn> Gemma, "USER: " with "ASSISTANT: " Vicuna,
  // <|start_header_id|> Llama-3; anything else throws std::invalid_argument
  // naming `source` and the supported formats.
  // A ChatML template that writes a fixed system turn when the first message
  // is not a system message (SmolLM2: "You are a helpful AI assistant named
  // SmolLM, trained by Hugging Face") gives that text as default_system.
  static ChatTemplate from_template_text(std::string_view jinja, std::string_view source = "chat template");
  // Reads tokenizer.chat_template; without it the Gemma format for the
  // gemma, gemma2 and gemma3 architectures, else GgufError.
  static ChatTemplate from_gguf(const GgufFile& file);

  ChatFormat format() const { return format_; }
  const std::optional<std::string>& default_system() const { return default_system_; }

  // ChatML: [<|im_start|>system\n{system}<|im_end|>\n]<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n
  // Llama-2: [INST] [<<SYS>>\n{system}\n<</SYS>>\n\n]{content} [/INST]
  // Llama-3: [<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>]
  //          <|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n
  // Gemma:   <start_of_turn>user\n[{system}\n\n]{content}<end_of_turn>\n<start_of_turn>model\n
  //          (Gemma has no system turn: llama.cpp puts it before the user text)
  // Vicuna:  [{system}\n\n]USER: {content}\nASSISTANT:
  // Phi-3:   [<|system|>\n{system}<|end|>\n]<|user|>\n{content}<|end|>\n<|assistant|>\n
  //          (llama.cpp's rendering; Phi-3-mini's own template drops a system turn)
  //   No BOS in the text (encode with the tokenizer's add_bos_default(), as
  //   llama.cpp does); the content is not trimmed (llama.cpp trims it for
  //   Llama-3 and Gemma; the datasets' prompts are already right-stripped).
  // `system` replaces the default system prompt; an empty string drops it.
  RenderedPrompt render_user(std::string_view content, std::optional<std::string_view> system = std::nullopt) const;

 private:
  ChatFormat format_;
  std::optional<std::string> default_system_;
};

}  // namespace midtune
