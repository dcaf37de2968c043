// Prompts exactly as docs/methods.md "Common evaluation protocol" (the Lost in the
// Middle templates, right-stripped of newlines; BABILong's default qa2
// prompt), with the byte span of every chunk, then wrapped for the model.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "datasets/batch_item.hpp"
#include "datasets/mdqa.hpp"

namespace midtune::datasets {

// A prompt before chat wrapping, with chunk spans into `text`.
struct RawPrompt {
  std::string text;
  std::vector<ByteSpan> chunks;
};

// KV: chunk i is `"k_i": "v_i"` (without the surrounding `{`, `,\n ` or `}`).
RawPrompt kv_prompt(const std::vector<std::pair<std::string, std::string>>& records, const std::string& key);
// QA: chunk i is the line `Document [i+1](Title: t) text`.
RawPrompt qa_prompt(const std::string& question, const std::vector<QaDocument>& documents);
// BABILong qa2: instruction, examples, post-prompt, <context>, question,
// stripped (BABILong prompts.py DEFAULT_TEMPLATE). Chunks are the sentences of
// the context (ending at '.', '!' or '?' followed by whitespace or the end).
RawPrompt babilong_prompt(const std::string& context, const std::string& question);

// The chat template's rendering of a user message.
struct WrappedPrompt {
  std::string text;
  std::size_t user_offset = 0;  // where the user message starts in `text`
};

// How prompts reach the model. `render` is typically the chat template of
// backends/engine/gguf/chat_template.hpp; `answer_lead` is what precedes the gold
// answer in the teacher-forced continuation: after a chat template's
// assistant header the answer starts the turn (""), while a base model
// continues "Corresponding value:" / "Answer:" with a space (" "). The gold is
// the bare value, without quotes: a model that opens with a quote scores 0 in
// teacher_forced mode but may still pass the generate-mode substring test.
struct PromptWrapper {
  std::string name;  // identifies the wrapping in slice identities
  std::function<WrappedPrompt(const std::string& user_message)> render;
  std::string answer_lead;

  // Base models and tests: the prompt as is, answers lead with a space.
  static PromptWrapper identity();
  // A fixed prefix/suffix pair around the user message.
  static PromptWrapper affixes(std::string name, std::string prefix, std::string suffix,
                               std::string answer_lead = "");
};

// How the answer starts. `primer` (optional) is appended after the wrapped
// prompt, i.e. written into the model's own turn, so that a chatty model
// starts the value at once; `gold` is the teacher-forced continuation.
// Without a primer the gold gets the wrapper's answer_lead in front.
struct AnswerStart {
  std::string primer;
  std::string gold;
};

// KV: gold = the value (no quotes). Primed: `The value corresponding to the
// key "K" is "` — the sentence SmolLM2-135M-Instruct starts its answers with.
AnswerStart kv_answer_start(const std::string& key, const std::string& value, bool prime);
// BABILong qa2, for "Where is the X?": unprimed gold "The X is in the Y." (the
// format the prompt demands; the bare location would never come first),
// primed `The X is in the` + gold " Y". Other questions: gold = target.
AnswerStart babilong_answer_start(const std::string& question, const std::string& target, bool prime);

// Adapts a chat template whose render result has `.text` and `.content_begin`
// (backends/engine/gguf/chat_template.hpp: ChatTemplate::render_user), without
// datasets depending on the engine:
//   chat_wrapper("chatml", [&](std::string_view m) { return tmpl.render_user(m); })
// ChatML's assistant turn starts the answer directly (answer_lead ""); for
// Llama-2 [INST] pass " " (its template writes ' ' + answer after [/INST]).
template <typename Render>
PromptWrapper chat_wrapper(std::string name, Render render, std::string answer_lead = "") {
  auto adapt = [render = std::move(render)](const std::string& message) {
    auto rendered = render(message);
    return WrappedPrompt{std::move(rendered.text), static_cast<std::size_t>(rendered.content_begin)};
  };
  return {std::move(name), std::move(adapt), std::move(answer_lead)};
}

// Wraps `prompt` and shifts its chunk spans into the wrapped text. Throws
// std::logic_error when the renderer does not contain the message verbatim
// at user_offset (the spans would be wrong).
BatchItem make_batch_item(const RawPrompt& prompt, const PromptWrapper& wrapper, std::string id,
                          const AnswerStart& answer, double gold_depth);

}  // namespace midtune::datasets
