#include "core/search/prompt_wrapper.hpp"

namespace midtune {

datasets::PromptWrapper prompt_wrapper(const Backend& backend) {
  auto chat = backend.chat_wrapper();
  if (!chat) return datasets::PromptWrapper::identity();
  // The answer starts the assistant turn (answer_lead "").
  return datasets::chat_wrapper(std::move(chat->name), std::move(chat->wrap));
}

}  // namespace midtune
