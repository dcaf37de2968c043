// Chat templates (issue 3 item 3): ChatML (SmolLM2, Qwen, ...) and Llama-2
// [INST], chosen from the GGUF's tokenizer.chat_template text. Renders a
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

enum class ChatFormat { chatml, llama2 };
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

  // ChatML when the template contains <|im_start|>, Llama-2 when it contains
  // [INST]; anything else throws std::invalid_argument naming `source`.
  // A ChatML template that writes a fixed system turn when the first message
  // is not a system message (SmolLM2: "You are a helpful AI assistant named
  // SmolLM, trained by Hugging Face") gives that text as default_system.
  static ChatTemplate from_template_text(std::string_view jinja, std::string_view source = "chat template");
  // Reads tokenizer.chat_template (GgufError when missing).
  static ChatTemplate from_gguf(const GgufFile& file);

  ChatFormat format() const { return format_; }
  const std::optional<std::string>& default_system() const { return default_system_; }

  // ChatML: [<|im_start|>system\n{system}<|im_end|>\n]<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n
  // Llama-2: [INST] [<<SYS>>\n{system}\n<</SYS>>\n\n]{content} [/INST]
  //   (no "<s>" in the text: encode with the tokenizer's add_bos_default(),
  //   as llama.cpp does; HF's content.strip() is not applied).
  // `system` replaces the default system prompt; an empty string drops it.
  RenderedPrompt render_user(std::string_view content, std::optional<std::string_view> system = std::nullopt) const;

 private:
  ChatFormat format_;
  std::optional<std::string> default_system_;
};

}  // namespace midtune
