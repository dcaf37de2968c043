#include "backends/engine/gguf/chat_template.hpp"

#include <stdexcept>

#include "backends/engine/gguf/gguf.hpp"

namespace midtune {
namespace {

// Undo Jinja string-literal escapes (\n, \t, \', \", \\).
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The fixed system turn of a ChatML template: a quoted literal
// '<|im_start|>system\n...<|im_end|>' written under a test that the first
// message is not a system message.
std::optional<std::string> chatml_default_system(std::string_view jinja) {
  if (jinja.find("!= 'system'") == std::string_view::npos && jinja.find("!= \"system\"") == std::string_view::npos)
    return std::nullopt;
  for (const char quote : {'\'', '"'}) {
    const std::string opener = std::string(1, quote) + "<|im_start|>system";
    for (std::size_t at = jinja.find(opener); at != std::string_view::npos; at = jinja.find(opener, at + 1)) {
      std::size_t i = at + opener.size();
      std::size_t body = 0;
      if (jinja.substr(i, 1) == "\n") body = i + 1;
      else if (jinja.substr(i, 2) == "\\n") body = i + 2;
      else continue;
      // The literal ends at the next unescaped quote.
      std::size_t close = body;
      while (close < jinja.size() && !(jinja[close] == quote && jinja[close - 1] != '\\')) ++close;
      if (close >= jinja.size()) continue;
      const std::string literal = unescape(jinja.substr(body, close - body));
      const auto end = literal.find("<|im_end|>");
      if (end == std::string::npos || end == 0) continue;
      return literal.substr(0, end);
    }
  }
  return std::nullopt;
}

}  // namespace

const char* to_string(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama2: return "llama2";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::gemma: return "gemma";
    case ChatFormat::vicuna: return "vicuna";
    case ChatFormat::phi3: return "phi3";
  }
  return "unknown";
}

ChatTemplate::ChatTemplate(ChatFormat format, std::optional<std::string> default_system)
    : format_(format), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::from_template_text(std::string_view jinja, std::string_view source) {
  if (jinja.find("<|im_start|>") != std::string_view::npos)
    return ChatTemplate(ChatFormat::chatml, chatml_default_system(jinja));
  const auto has = [&](std::string_view marker) { return jinja.find(marker) != std::string_view::npos; };
  if (has("[INST]")) return ChatTemplate(ChatFormat::llama2);
  if (has("<|assistant|>") && has("<|end|>")) return ChatTemplate(ChatFormat::phi3);
  if (has("<start_of_turn>")) return ChatTemplate(ChatFormat::gemma);
  if (has("USER: ") && has("ASSISTANT: ")) return ChatTemplate(ChatFormat::vicuna);
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatTemplate(ChatFormat::llama3);
  throw std::invalid_argument(std::string(source) +
                              ": unsupported chat template (supported: ChatML <|im_start|>, Llama-2 [INST], "
                              "Llama-3 <|start_header_id|>, Phi-3 <|assistant|>/<|end|>, Gemma <start_of_turn>, "
                              "Vicuna USER:/ASSISTANT:)");
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
  // Google's base Gemma checkpoints may be converted without a template (the
  // real Gemma 3 270M GGUF has none); every Gemma's (1, 2, 3) is the
  // <start_of_turn> form. llama.cpp falls back to ChatML there, whose
  // markers are plain text in Gemma's vocabulary.
  if (!file.has("tokenizer.chat_template") && file.has("general.architecture")) {
    const std::string arch = file.get_string("general.architecture");
    if (arch == "gemma" || arch == "gemma2" || arch == "gemma3") return ChatTemplate(ChatFormat::gemma);
  }
  return from_template_text(file.get_string("tokenizer.chat_template"),
                            file.path().string() + ": tokenizer.chat_template");
}

RenderedPrompt ChatTemplate::render_user(std::string_view content, std::optional<std::string_view> system) const {
  std::string_view sys;
  if (system) sys = *system;
  else if (default_system_) sys = *default_system_;
  // Every format is lead [system_open system system_close] user_open
  // content close; Llama-2 and Gemma put the system text inside the user turn.
  struct Turns {
    std::string_view lead, system_open, system_close, user_open, close;
  };
  Turns f;
  switch (format_) {
    case ChatFormat::chatml:
      f = {"", "<|im_start|>system\n", "<|im_end|>\n", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"};
      break;
    case ChatFormat::llama2:
      f = {"[INST] ", "<<SYS>>\n", "\n<</SYS>>\n\n", "", " [/INST]"};
      break;
    case ChatFormat::llama3:
      f = {"", "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>",
           "<|start_header_id|>user<|end_header_id|>\n\n",
           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"};
      break;
    case ChatFormat::gemma:
      f = {"<start_of_turn>user\n", "", "\n\n", "", "<end_of_turn>\n<start_of_turn>model\n"};
      break;
    case ChatFormat::vicuna:
      f = {"", "", "\n\n", "USER: ", "\nASSISTANT:"};
      break;
    case ChatFormat::phi3:
      f = {"", "<|system|>\n", "<|end|>\n", "<|user|>\n", "<|end|>\n<|assistant|>\n"};
      break;
  }
  RenderedPrompt out;
  std::string& t = out.text;
  t += f.lead;
  if (!sys.empty()) t.append(f.system_open).append(sys).append(f.system_close);
  t += f.user_open;
  out.content_begin = t.size();
  t += content;
  out.content_end = t.size();
  t += f.close;
  return out;
}

}  // namespace midtune
