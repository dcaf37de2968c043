#include "datasets/prompts.hpp"

#include "datasets/babilong.hpp"
#include "datasets/scoring.hpp"

#include <gtest/gtest.h>

namespace midtune::datasets {
namespace {

std::string span_text(const BatchItem& item, std::size_t chunk) {
  const auto& span = item.chunks[chunk];
  return item.prompt_text.substr(span.begin, span.end - span.begin);
}

TEST(KvPrompt, ExactTemplateAndSpans) {
  const auto prompt = kv_prompt({{"k1", "v1"}, {"k2", "v2"}, {"k3", "v3"}}, "k2");
  EXPECT_EQ(prompt.text,
            "Extract the value corresponding to the specified key in the JSON object below.\n\nJSON data:\n"
            "{\"k1\": \"v1\",\n \"k2\": \"v2\",\n \"k3\": \"v3\"}\n\nKey: \"k2\"\nCorresponding value:");
  ASSERT_EQ(prompt.chunks.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& span = prompt.chunks[i];
    const std::string n = std::to_string(i + 1);
    EXPECT_EQ(prompt.text.substr(span.begin, span.end - span.begin), "\"k" + n + "\": \"v" + n + "\"");
  }
}

TEST(QaPrompt, ExactTemplateAndSpans) {
  const auto prompt = qa_prompt("who?", {{"T1", "first text", false, false}, {"T2", "second", true, true}});
  EXPECT_EQ(prompt.text,
            "Write a high-quality answer for the given question using only the provided search results (some of "
            "which might be irrelevant).\n\nDocument [1](Title: T1) first text\nDocument [2](Title: T2) second\n\n"
            "Question: who?\nAnswer:");
  ASSERT_EQ(prompt.chunks.size(), 2u);
  EXPECT_EQ(prompt.text.substr(prompt.chunks[1].begin, prompt.chunks[1].end - prompt.chunks[1].begin),
            "Document [2](Title: T2) second");
}

TEST(BabilongPrompt, LayoutAndSentenceChunks) {
  const auto prompt = babilong_prompt("Ann went to the office. It rained!  Bob slept", "Where is the box?");
  const auto context_at = prompt.text.find("<context>\nAnn went");
  ASSERT_NE(context_at, std::string::npos);
  EXPECT_EQ(prompt.text.rfind("I give you context", 0), 0u);
  EXPECT_NE(prompt.text.find("</example>\nAlways return your answer"), std::string::npos);
  EXPECT_TRUE(prompt.text.ends_with("Bob slept\n</context>\nQuestion: Where is the box?"));
  ASSERT_EQ(prompt.chunks.size(), 3u);
  const auto text = [&](std::size_t i) {
    return prompt.text.substr(prompt.chunks[i].begin, prompt.chunks[i].end - prompt.chunks[i].begin);
  };
  EXPECT_EQ(text(0), "Ann went to the office.");
  EXPECT_EQ(text(1), "It rained!");
  EXPECT_EQ(text(2), "Bob slept");
}

TEST(BabilongPrompt, TrailingWhitespaceIsStripped) {
  const auto prompt = babilong_prompt("A. B.", "Where?  \n");
  EXPECT_TRUE(prompt.text.ends_with("Question: Where?"));
}

TEST(Wrapping, IdentityKeepsSpansAndLeadsGoldWithSpace) {
  const auto raw = kv_prompt({{"a", "b"}, {"c", "d"}}, "c");
  const auto item = make_batch_item(raw, PromptWrapper::identity(), "id-1", {"", "d"}, 1.0);
  EXPECT_EQ(item.prompt_text, raw.text);
  EXPECT_EQ(item.chunks, raw.chunks);
  EXPECT_EQ(item.gold, " d");
  EXPECT_EQ(item.id, "id-1");
  EXPECT_DOUBLE_EQ(item.gold_depth, 1.0);
}

TEST(Wrapping, AffixesShiftSpans) {
  const auto raw = kv_prompt({{"a", "b"}, {"c", "d"}}, "c");
  const auto wrapper = PromptWrapper::affixes("chatml-like", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n");
  const auto item = make_batch_item(raw, wrapper, "x", {"", "d"}, 0.0);
  EXPECT_TRUE(item.prompt_text.starts_with("<|im_start|>user\nExtract"));
  EXPECT_TRUE(item.prompt_text.ends_with("Corresponding value:<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(span_text(item, 0), "\"a\": \"b\"");
  EXPECT_EQ(span_text(item, 1), "\"c\": \"d\"");
  EXPECT_EQ(item.gold, "d");
}

TEST(Wrapping, ChatTemplateAdapter) {
  // Shaped like backends/engine/gguf/chat_template.hpp's RenderedPrompt.
  struct Rendered {
    std::string text;
    std::size_t content_begin = 0;
    std::size_t content_end = 0;
  };
  const auto render = [](std::string_view content) {
    const std::string head = "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\n";
    return Rendered{head + std::string(content) + "<|im_end|>\n<|im_start|>assistant\n", head.size(),
                    head.size() + content.size()};
  };
  const auto item = make_batch_item(qa_prompt("q?", {{"T", "body", true, true}}), chat_wrapper("chatml", render),
                                    "id", {"", "gold"}, 0.0);
  EXPECT_EQ(span_text(item, 0), "Document [1](Title: T) body");
  EXPECT_EQ(item.gold, "gold");
}

TEST(Wrapping, PrimerGoesIntoTheModelsTurn) {
  const auto raw = kv_prompt({{"a", "b"}, {"c", "d"}}, "c");
  const auto chat = PromptWrapper::affixes("chat", "<u>", "</u><a>");
  const auto item = make_batch_item(raw, chat, "x", kv_answer_start("c", "d", true), 0.0);
  EXPECT_TRUE(item.prompt_text.ends_with("</u><a>The value corresponding to the key \"c\" is \"")) << item.prompt_text;
  EXPECT_EQ(item.gold, "d");
  EXPECT_EQ(span_text(item, 1), "\"c\": \"d\"");
  // Base model: the primer follows the answer lead ("Corresponding value: The value ...").
  const auto base = make_batch_item(raw, PromptWrapper::identity(), "x", kv_answer_start("c", "d", true), 0.0);
  EXPECT_TRUE(base.prompt_text.ends_with("Corresponding value: The value corresponding to the key \"c\" is \""));
  EXPECT_EQ(base.gold, "d");
  const auto plain = kv_answer_start("c", "d", false);
  EXPECT_EQ(plain.primer, "");
  EXPECT_EQ(plain.gold, "d");
}

TEST(BabilongAnswer, FollowsThePromptFormat) {
  EXPECT_EQ(babilong_asked_item("Where is the screw driver? "), "screw driver");
  EXPECT_EQ(babilong_asked_item("Where was the milk before the office?"), "");
  EXPECT_EQ(babilong_asked_item("Where is the ?"), "");
  const auto unprimed = babilong_answer_start("Where is the lantern?", "bedroom", false);
  EXPECT_EQ(unprimed.primer, "");
  EXPECT_EQ(unprimed.gold, "The lantern is in the bedroom.");
  const auto primed = babilong_answer_start("Where is the lantern?", "bedroom", true);
  EXPECT_EQ(primed.primer, "The lantern is in the");
  EXPECT_EQ(primed.gold, " bedroom");
  EXPECT_EQ(babilong_answer_start("Where was the milk before the office?", "garden", true).gold, "garden");
  // Both forms pass the BABILong scoring rule.
  EXPECT_TRUE(babilong_correct(unprimed.gold, "bedroom", "Where is the lantern?"));
  EXPECT_TRUE(babilong_correct(primed.gold + ".", "bedroom", "Where is the lantern?"));
}

TEST(Wrapping, RendererThatAltersTheMessageIsRejected) {
  PromptWrapper lying{"bad", [](const std::string& message) { return WrappedPrompt{"x" + message, 0}; }, ""};
  EXPECT_THROW(make_batch_item(kv_prompt({{"a", "b"}, {"c", "d"}}, "a"), lying, "x", {"", "b"}, 0), std::logic_error);
  PromptWrapper beyond{"bad", [](const std::string& message) { return WrappedPrompt{message, 99999}; }, ""};
  EXPECT_THROW(make_batch_item(kv_prompt({{"a", "b"}, {"c", "d"}}, "a"), beyond, "x", {"", "b"}, 0), std::logic_error);
}

}  // namespace
}  // namespace midtune::datasets
