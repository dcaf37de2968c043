#include "core/cli/prompt_wrapper.hpp"

#include "backends/engine/chat_template.hpp"
#include "backends/server/server_backend.hpp"

namespace midtune {

namespace {

std::string chat_template_name(const Backend& backend) {
  return "chat-template:" + backend.identity().tokenizer_hash;
}

}  // namespace

datasets::PromptWrapper engine_prompt_wrapper(const engine::EngineBackend& backend) {
  const ChatTemplate chat = ChatTemplate::from_gguf(backend.model().file());
  datasets::PromptWrapper wrapper;
  wrapper.name = chat_template_name(backend);
  wrapper.render = [chat](const std::string& message) {
    const RenderedPrompt r = chat.render_user(message);
    return datasets::WrappedPrompt{r.text, r.content_begin};
  };
  wrapper.answer_lead = "";  // the answer starts the assistant turn
  return wrapper;
}

datasets::PromptWrapper prompt_wrapper(const Backend& backend) {
  if (const auto* served = dynamic_cast<const server::ServerBackend*>(&backend)) {
    const auto wrap = served->user_prompt();
    if (!wrap) return datasets::PromptWrapper::identity();
    datasets::PromptWrapper wrapper;
    wrapper.name = chat_template_name(backend);
    wrapper.render = [wrap = *wrap](const std::string& message) {
      return datasets::WrappedPrompt{wrap.prefix + message + wrap.suffix, wrap.prefix.size()};
    };
    wrapper.answer_lead = "";
    return wrapper;
  }
  if (const auto* engine_backend = dynamic_cast<const engine::EngineBackend*>(&backend)) {
    return engine_prompt_wrapper(*engine_backend);
  }
  return datasets::PromptWrapper::identity();
}

}  // namespace midtune
