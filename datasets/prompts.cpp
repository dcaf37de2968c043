#include "datasets/prompts.hpp"

#include <stdexcept>

#include "datasets/babilong.hpp"

namespace midtune::datasets {
namespace {

constexpr std::string_view kKvInstruction =
    "Extract the value corresponding to the specified key in the JSON object below.\n\nJSON data:\n";
constexpr std::string_view kQaInstruction =
    "Write a high-quality answer for the given question using only the provided search results "
    "(some of which might be irrelevant).\n\n";

// BABILong's default qa2 prompt (booydar/babilong, babilong/prompts.py),
// reproduced as published, including its missing space after "question.".
constexpr std::string_view kBabilongQa2Instruction =
    "I give you context with the facts about locations and actions of different persons hidden in some "
    "random text and a question.You need to answer the question based only on the information from the "
    "facts.\nIf a person got an item in the first location and travelled to the second location the item "
    "is also in the second location. If a person dropped an item in the first location and moved to the "
    "second location the item remains in the first location.";
constexpr std::string_view kBabilongQa2Examples =
    "<example>\nCharlie went to the kitchen. Charlie got a bottle. Charlie moved to the balcony. Where is "
    "the bottle?\nAnswer: The bottle is in the balcony.\n</example>\n<example>\nAlan moved to the garage. "
    "Alan got a screw driver. Alan moved to the kitchen. Where is the screw driver?\nAnswer: The screw "
    "driver is in the kitchen.\n</example>";
constexpr std::string_view kBabilongQa2PostPrompt =
    "Always return your answer in the following format: The \u2019item\u2019 is in \u2019location\u2019. Do "
    "not write anything else after that.";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

void append_chunk(RawPrompt& prompt, std::string_view chunk) {
  prompt.chunks.push_back({prompt.text.size(), prompt.text.size() + chunk.size()});
  prompt.text += chunk;
}

}  // namespace

RawPrompt kv_prompt(const std::vector<std::pair<std::string, std::string>>& records, const std::string& key) {
  if (records.empty()) throw std::invalid_argument("kv_prompt: no records");
  RawPrompt prompt;
  prompt.text = kKvInstruction;
  for (std::size_t i = 0; i < records.size(); ++i) {
    prompt.text += i == 0 ? "{" : " ";
    append_chunk(prompt, "\"" + records[i].first + "\": \"" + records[i].second + "\"");
    prompt.text += i + 1 == records.size() ? "}" : ",\n";
  }
  prompt.text += "\n\nKey: \"" + key + "\"\nCorresponding value:";
  return prompt;
}

RawPrompt qa_prompt(const std::string& question, const std::vector<QaDocument>& documents) {
  if (documents.empty()) throw std::invalid_argument("qa_prompt: no documents");
  RawPrompt prompt;
  prompt.text = kQaInstruction;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    if (i > 0) prompt.text += "\n";
    append_chunk(prompt, "Document [" + std::to_string(i + 1) + "](Title: " + documents[i].title + ") " +
                             documents[i].text);
  }
  prompt.text += "\n\nQuestion: " + question + "\nAnswer:";
  return prompt;
}

RawPrompt babilong_prompt(const std::string& context, const std::string& question) {
  RawPrompt prompt;
  prompt.text = std::string(kBabilongQa2Instruction) + "\n" + std::string(kBabilongQa2Examples) + "\n" +
                std::string(kBabilongQa2PostPrompt) + "\n<context>\n";
  const std::size_t context_start = prompt.text.size();
  prompt.text += context + "\n</context>\nQuestion: " + question;
  // Python's str.strip(): the instruction starts with a letter, so only the end can change.
  while (!prompt.text.empty() && is_space(prompt.text.back())) prompt.text.pop_back();
  const std::size_t context_end = context_start + context.size();
  std::size_t start = context_start;
  while (start < context_end && is_space(prompt.text[start])) ++start;
  for (std::size_t i = start; i < context_end; ++i) {
    const char c = prompt.text[i];
    const bool ends_sentence = (c == '.' || c == '!' || c == '?') && (i + 1 == context_end || is_space(prompt.text[i + 1]));
    if (!ends_sentence) continue;
    prompt.chunks.push_back({start, i + 1});
    start = i + 1;
    while (start < context_end && is_space(prompt.text[start])) ++start;
  }
  if (start < context_end) prompt.chunks.push_back({start, context_end});
  return prompt;
}

PromptWrapper PromptWrapper::identity() {
  return {"identity", [](const std::string& message) { return WrappedPrompt{message, 0}; }, " "};
}

PromptWrapper PromptWrapper::affixes(std::string name, std::string prefix, std::string suffix,
                                     std::string answer_lead) {
  auto render = [prefix = std::move(prefix), suffix = std::move(suffix)](const std::string& message) {
    return WrappedPrompt{prefix + message + suffix, prefix.size()};
  };
  return {std::move(name), std::move(render), std::move(answer_lead)};
}

AnswerStart kv_answer_start(const std::string& key, const std::string& value, bool prime) {
  if (!prime) return {"", value};
  return {"The value corresponding to the key \"" + key + "\" is \"", value};
}

AnswerStart babilong_answer_start(const std::string& question, const std::string& target, bool prime) {
  const std::string item = babilong_asked_item(question);
  if (item.empty()) return {"", target};
  if (prime) return {"The " + item + " is in the", " " + target};
  return {"", "The " + item + " is in the " + target + "."};
}

BatchItem make_batch_item(const RawPrompt& prompt, const PromptWrapper& wrapper, std::string id,
                          const AnswerStart& answer, double gold_depth) {
  if (!wrapper.render) throw std::logic_error("prompt wrapper '" + wrapper.name + "' has no renderer");
  WrappedPrompt wrapped = wrapper.render(prompt.text);
  if (wrapped.user_offset > wrapped.text.size() ||
      wrapped.text.compare(wrapped.user_offset, prompt.text.size(), prompt.text) != 0) {
    throw std::logic_error("prompt wrapper '" + wrapper.name +
                           "' did not place the user message verbatim at its reported offset");
  }
  BatchItem item;
  item.id = std::move(id);
  item.prompt_text = std::move(wrapped.text);
  item.chunks.reserve(prompt.chunks.size());
  for (const auto& span : prompt.chunks) {
    item.chunks.push_back({span.begin + wrapped.user_offset, span.end + wrapped.user_offset});
  }
  if (answer.primer.empty()) {
    item.gold = wrapper.answer_lead + answer.gold;
  } else {
    item.prompt_text += wrapper.answer_lead + answer.primer;
    item.gold = answer.gold;
  }
  item.gold_depth = gold_depth;
  return item;
}

}  // namespace midtune::datasets
