// The real engine served by two ga-serve processes answers exactly like the
// same engine in-process (model test: needs MIDTUNE_MODEL, skips without it).
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "backends/engine/gguf/chat_template.hpp"
#include "backends/engine/engine_backend.hpp"
#include "backends/server/server_backend.hpp"
#include "tests/server/loopback.hpp"
#include "tests/server/serve_process.hpp"

namespace midtune::server {
namespace {

std::string model_path() {
  if (const char* env = std::getenv("MIDTUNE_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(EngineServed, TwoGaServeProcessesAnswerLikeTheInProcessEngine) {
  const std::string model = model_path();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "model not found: " << model;
  testing::ServeProcess a({"--model", model, "--threads", "1"}), b({"--model", model, "--threads", "1"});
  ServerBackendOptions options;
  options.endpoints = {a.url(), b.url()};
  options.chunk_items = 1;
  ServerBackend served(options);

  engine::EngineOptions engine_options;
  engine_options.threads = 1;
  engine::EngineBackend local(model, engine_options);
  ASSERT_EQ(served.identity().key(), local.identity().key());

  // Prompts wrapped with the template the servers announce, as ga-run does.
  const auto wrap = served.user_prompt();
  ASSERT_TRUE(wrap);
  const RenderedPrompt expected = ChatTemplate::from_gguf(local.model().file()).render_user("x");
  EXPECT_EQ(wrap->prefix + "x" + wrap->suffix, expected.text);
  std::vector<BatchItem> items;
  const char* facts[] = {"The key apple maps to 4417.", "The key pear maps to 9021.", "The key plum maps to 1180.",
                         "The key fig maps to 5532."};
  for (int i = 0; i < 4; ++i) {
    BatchItem item;
    item.id = "fact-" + std::to_string(i);
    const std::string message = std::string(facts[i]) + " What does it map to? Answer with the number.";
    item.prompt_text = wrap->prefix + message + wrap->suffix;
    item.chunks = {{wrap->prefix.size(), wrap->prefix.size() + std::string(facts[i]).size()}};
    item.gold = std::string(facts[i]).substr(std::string(facts[i]).size() - 5, 4);
    items.push_back(item);
  }
  for (const RunOptions run : {RunOptions{Mode::teacher_forced, 8}, RunOptions{Mode::generate, 8}}) {
    for (double scale : {1.0, 1.5}) {
      SCOPED_TRACE(std::string(to_string(run.mode)) + " scale " + std::to_string(scale));
      const auto remote = served.run(testing::lpes_like(scale), items, run);
      testing::expect_same_outputs(remote, local.run(testing::lpes_like(scale), items, run));
      if (run.mode == Mode::generate) EXPECT_FALSE(remote[0].output_text.empty());
      else EXPECT_LT(remote[0].gold_logprob, 0.0);
    }
  }
}

}  // namespace
}  // namespace midtune::server
