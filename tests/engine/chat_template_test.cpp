// Chat templates: format detection from the Jinja text, default system
// prompt extraction, rendering and the user-content offsets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <nlohmann/json.hpp>

#include "backends/engine/gguf/chat_template.hpp"
#include "backends/engine/gguf/gguf.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"
#include "tests/test_paths.hpp"

namespace midtune {
namespace {

constexpr const char* kSmolTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// Escaped newlines and a double-quoted literal, as other ChatML models write it.
constexpr const char* kEscapedTemplate =
    "{%- if messages[0].role != \"system\" %}{{- \"<|im_start|>system\\nYou are \\\"Q\\\", a bot.<|im_end|>\\n\" }}"
    "{%- endif %}{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endfor %}";

constexpr const char* kPlainChatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

constexpr const char* kLlama2Template =
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "message['content'].strip() + ' [/INST]' }}{% endif %}{% endfor %}";

TEST(ChatTemplate, SmolLM2DefaultSystemAndOffsets) {
  const auto chat = ChatTemplate::from_template_text(kSmolTemplate);
  EXPECT_EQ(chat.format(), ChatFormat::chatml);
  EXPECT_EQ(chat.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const auto p = chat.render_user("Hi there");
  EXPECT_EQ(p.text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(p.text.substr(p.content_begin, p.content_end - p.content_begin), "Hi there");
  // An explicit system prompt replaces the default; an empty one drops the turn.
  EXPECT_EQ(chat.render_user("x", "Be brief.").text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
  const auto bare = chat.render_user("x", "");
  EXPECT_EQ(bare.text, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(bare.content_begin, 17u);
}

TEST(ChatTemplate, OtherChatmlTemplates) {
  EXPECT_EQ(ChatTemplate::from_template_text(kEscapedTemplate).default_system(), "You are \"Q\", a bot.");
  const auto plain = ChatTemplate::from_template_text(kPlainChatml);
  EXPECT_EQ(plain.default_system(), std::nullopt);
  EXPECT_EQ(plain.render_user("q").text, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama2) {
  const auto chat = ChatTemplate::from_template_text(kLlama2Template);
  EXPECT_EQ(chat.format(), ChatFormat::llama2);
  const auto p = chat.render_user(" keep spaces ");
  EXPECT_EQ(p.text, "[INST]  keep spaces  [/INST]");
  EXPECT_EQ(p.text.substr(p.content_begin, p.content_end - p.content_begin), " keep spaces ");
  EXPECT_EQ(chat.render_user("q", "sys").text, "[INST] <<SYS>>\nsys\n<</SYS>>\n\nq [/INST]");
}

// SmolLM2's and Llama-2's Jinja templates rendered by jinja2 (fixture from
// tests/reference/make_tokenizer_fixtures.py). Our Llama-2 text leaves the
// BOS to the tokenizer, so the template's leading bos_token text is dropped.
TEST(ChatTemplate, MatchesJinjaRenderings) {
  std::ifstream in(midtune::testing::source_dir() + "/tests/engine/fixtures/chat_templates.json");
  ASSERT_TRUE(in) << "fixture missing";
  const auto fixture = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& tmpl : fixture["templates"]) {
    const auto chat = ChatTemplate::from_template_text(tmpl["template"].get<std::string>());
    EXPECT_EQ(to_string(chat.format()), std::string(tmpl["name"] == "llama2" ? "llama2" : "chatml"));
    const auto bos_text = tmpl["bos_text"].get<std::string>();
    for (const auto& c : tmpl["cases"]) {
      const auto content = c["content"].get<std::string>();
      std::optional<std::string> system;
      if (!c["system"].is_null()) system = c["system"].get<std::string>();
      const auto p = chat.render_user(content, system);
      EXPECT_EQ(bos_text + p.text, c["rendered"].get<std::string>());
      EXPECT_EQ(p.text.substr(p.content_begin, p.content_end - p.content_begin), content);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12);
}

// Meta-Llama-3-8B-Instruct's and gemma-7b-it's templates; the expected texts
// are jinja2's renderings of them (add_generation_prompt=True), less the
// bos_token that the tokenizer adds.
constexpr const char* kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
constexpr const char* kGemmaTemplate =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% "
    "endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else "
    "%}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
    "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";
constexpr const char* kVicunaTemplate =
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\n\n' }}{% endif %}{% for message in "
    "messages %}{% if message['role'] == 'user' %}{{ 'USER: ' + message['content'] + '\n' }}{% elif "
    "message['role'] == 'assistant' %}{{ 'ASSISTANT: ' + message['content'] + '</s>\n' }}{% endif %}{% endfor "
    "%}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}";

TEST(ChatTemplate, Llama3GemmaVicuna) {
  const std::string content = "Key: \"a\"\nValue:";
  const auto llama3 = ChatTemplate::from_template_text(kLlama3Template);
  ASSERT_EQ(llama3.format(), ChatFormat::llama3);
  EXPECT_EQ(llama3.render_user(content).text,
            "<|start_header_id|>user<|end_header_id|>\n\nKey: \"a\"\nValue:<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(llama3.render_user("q", "sys").text,
            "<|start_header_id|>system<|end_header_id|>\n\nsys<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nq<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");

  const auto gemma = ChatTemplate::from_template_text(kGemmaTemplate);
  ASSERT_EQ(gemma.format(), ChatFormat::gemma);
  EXPECT_EQ(gemma.render_user(content).text, "<start_of_turn>user\nKey: \"a\"\nValue:<end_of_turn>\n<start_of_turn>model\n");
  // No system turn in Gemma: llama.cpp puts the system text before the user's.
  EXPECT_EQ(gemma.render_user("q", "sys").text, "<start_of_turn>user\nsys\n\nq<end_of_turn>\n<start_of_turn>model\n");

  const auto vicuna = ChatTemplate::from_template_text(kVicunaTemplate);
  ASSERT_EQ(vicuna.format(), ChatFormat::vicuna);
  EXPECT_EQ(vicuna.render_user("q", "sys").text, "sys\n\nUSER: q\nASSISTANT:");

  for (const ChatTemplate* chat : {&llama3, &gemma, &vicuna}) {
    const auto p = chat->render_user(" keep spaces ");
    EXPECT_EQ(p.text.substr(p.content_begin, p.content_end - p.content_begin), " keep spaces ") << to_string(chat->format());
  }
}

// Qwen3-0.6B's template (llama.cpp's models/templates copy): ChatML with
// tool and reasoning branches, no default system turn. With one user message
// (and an optional system one), no tools and thinking left on, it renders as
// plain ChatML (the template's own text, read branch by branch).
TEST(ChatTemplate, Qwen3IsChatMlWithoutADefaultSystem) {
  std::ifstream in(midtune::testing::source_dir() + "/tests/engine/fixtures/chat_template_qwen3.jinja");
  ASSERT_TRUE(in) << "fixture missing";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto chat = ChatTemplate::from_template_text(text);
  EXPECT_EQ(chat.format(), ChatFormat::chatml);
  EXPECT_FALSE(chat.default_system().has_value());
  EXPECT_EQ(chat.render_user("Hi there").text, "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.render_user("Hi there", "Be brief.").text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
}

// Phi-3-mini-4k's template (as the phi-3 vocabulary GGUF holds it) and
// Phi-3.5-mini's (llama.cpp's models/templates copy). The expected texts are
// jinja2's renderings (add_generation_prompt=True, less the mini's
// bos_token, which the tokenizer adds). With a system prompt the text is
// llama.cpp's and Phi-3.5's: Phi-3-mini's own template drops the system turn.
constexpr const char* kPhi3MiniTemplate =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + "
    "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') "
    "%}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}";

TEST(ChatTemplate, Phi3) {
  std::ifstream in(midtune::testing::source_dir() + "/tests/engine/fixtures/chat_template_phi3_5.jinja");
  ASSERT_TRUE(in) << "fixture missing";
  const std::string phi35_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto mini = ChatTemplate::from_template_text(kPhi3MiniTemplate);
  const auto phi35 = ChatTemplate::from_template_text(phi35_text);
  for (const ChatTemplate* chat : {&mini, &phi35}) {
    ASSERT_EQ(chat->format(), ChatFormat::phi3);
    EXPECT_FALSE(chat->default_system().has_value());
    EXPECT_EQ(chat->render_user("Key: \"a\"\nValue:").text, "<|user|>\nKey: \"a\"\nValue:<|end|>\n<|assistant|>\n");
    EXPECT_EQ(chat->render_user("Hi there", "Be brief.").text,
              "<|system|>\nBe brief.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\n");
    const auto p = chat->render_user(" keep spaces ");
    EXPECT_EQ(p.text.substr(p.content_begin, p.content_end - p.content_begin), " keep spaces ");
  }
  EXPECT_STREQ(to_string(ChatFormat::phi3), "phi3");
}

// Gemma 2's template (llama.cpp's models/templates/google-gemma-2-2b-it
// copy; Gemma 3's has the same turns, and puts a system text before the
// first user text with "\n\n" as render_user does). The expected text is
// jinja2's rendering (one user message, add_generation_prompt=True) less
// the bos_token that the tokenizer adds.
TEST(ChatTemplate, Gemma2TemplateIsGemma) {
  std::ifstream in(midtune::testing::source_dir() + "/tests/engine/fixtures/chat_template_gemma2.jinja");
  ASSERT_TRUE(in) << "fixture missing";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto chat = ChatTemplate::from_template_text(text);
  EXPECT_EQ(chat.format(), ChatFormat::gemma);
  const RenderedPrompt r = chat.render_user("What is 7 times 8?");
  EXPECT_EQ(r.text, "<start_of_turn>user\nWhat is 7 times 8?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(r.text.substr(r.content_begin, r.content_end - r.content_begin), "What is 7 times 8?");
}

// A Gemma GGUF without tokenizer.chat_template (the real Gemma 3 270M
// file) gets the Gemma format; other architectures still need the key.
TEST(ChatTemplate, GemmaWithoutATemplateKeyIsGemma) {
  const auto file_of = [](const std::string& arch, bool with_template) {
    testing::TinyGgufWriter w;
    w.add_string("general.architecture", arch);
    if (with_template) w.add_string("tokenizer.chat_template", kPlainChatml);
    return std::make_unique<testing::MemoryFile>(w.bytes());
  };
  for (const std::string arch : {"gemma", "gemma2", "gemma3"}) {
    const auto file = file_of(arch, false);
    EXPECT_EQ(ChatTemplate::from_gguf(GgufFile(file->path())).format(), ChatFormat::gemma) << arch;
    const auto with = file_of(arch, true);  // a template in the file wins
    EXPECT_EQ(ChatTemplate::from_gguf(GgufFile(with->path())).format(), ChatFormat::chatml) << arch;
  }
  const auto llama = file_of("llama", false);
  EXPECT_THAT([&] { ChatTemplate::from_gguf(GgufFile(llama->path())); },
              ::testing::ThrowsMessage<GgufError>(::testing::HasSubstr("tokenizer.chat_template")));
}

TEST(ChatTemplate, UnknownTemplateIsAnError) {
  EXPECT_THAT([] { ChatTemplate::from_template_text("{{ messages }}", "model.gguf"); },
              ::testing::ThrowsMessage<std::invalid_argument>(::testing::HasSubstr("model.gguf")));
  EXPECT_STREQ(to_string(ChatFormat::llama2), "llama2");
}

}  // namespace
}  // namespace midtune
