// A method that reuses an existing mechanism is its module plus one registry
// line, and nothing in any backend. The toy method here, "moses" (CALIOPE
// with the Moses calibrator only and one gene, the gap), is defined and
// registered in this file alone, then run through the CPU engine on the tiny
// random Llama (tests/engine/tiny_llama_gguf.hpp, with its small
// SentencePiece vocabulary, so it runs under the sanitizers too). It must
// act exactly as CALIOPE with the same parameters (same field, same
// mechanism) and differ from the plain model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "backends/engine/engine_backend.hpp"
#include "methods/caliope.hpp"
#include "methods/registry.hpp"
#include "tests/engine/tiny_llama_gguf.hpp"

namespace midtune {
namespace {

PositionMap moses_from_genes(const GeneValues& genes) {
  PositionMap p;
  p.kind = "moses";
  p.gap = genes.number("gap");
  return p;
}

// The toy method's whole module: CALIOPE's field, mechanism, JSON and
// validation; its own name and gene table.
const MethodModule& moses_method() {
  static const MethodModule module = optional_field_method<PositionMap>(
      "moses", "position_map", Mechanism::prompt_positions, &Intervention::position_map,
      {GeneSchema{.name = "gap", .type = GeneType::real, .paper_default = PositionMap{}.gap, .lower = 0.0,
                  .upper = 1e6, .choices = {}, .meaning = "position gap between chunks"}},
      {}, {position_map_to_json, position_map_from_json, validate_position_map, moses_from_genes},
      PositionMap{.kind = "moses"});
  return module;
}

// The registry line, once per process, before the registry is read.
const MethodModule& registered_moses() {
  static const bool once = (register_method(moses_method()), true);
  (void)once;
  return moses_method();
}

Intervention moses_with_gap(double gap) {
  GeneValues genes("moses");
  genes.set("gap", gap);
  Intervention iv;
  method_named("moses").apply_genes(genes, iv);
  return iv;
}

TEST(MethodPlugin, TheRegisteredMethodIsKnownWhereverTheRegistryIsAsked) {
  const MethodModule& moses = registered_moses();
  EXPECT_EQ(find_method("moses"), &moses);
  EXPECT_EQ(method_names().back(), "moses");
  EXPECT_NE(std::find(gene_table_methods().begin(), gene_table_methods().end(), "moses"), gene_table_methods().end());
  // It adds no field: CALIOPE, listed first, still owns position_map (JSON,
  // validation, server probe).
  EXPECT_EQ(intervention_fields(),
            (std::vector<std::string>{"rope_scale", "mspoe", "position_map", "siw", "hidden_channel",
                                      "attention_temperature", "self_extend", "string_shift"}));
  EXPECT_EQ(std::count(field_owners().begin(), field_owners().end(), &moses), 0);

  const Intervention iv = moses_with_gap(5000.0);
  EXPECT_EQ(iv.to_json().dump(), R"({"position_map":{"gap":5000.0,"kind":"moses"}})");
  EXPECT_EQ(Intervention::from_json(iv.to_json()), iv);
  // Run as its mechanism says, with no word about the method.
  EXPECT_EQ(intervention_needs(iv), mechanism_needs(Mechanism::prompt_positions));
  EXPECT_TRUE(intervention_needs(iv).prompt_alone);
  // Validation is CALIOPE's, through the registry.
  const ModelShape shape{.layers = 1, .heads = 1, .kv_heads = 1, .hidden = 1, .rope = true, .architecture = {}};
  EXPECT_THROW(validate_intervention(moses_with_gap(-5.0), shape), std::invalid_argument);
}

// The test's own cache folder for the model's content hash (the engine
// stores one entry per file version; a temporary file must not leave entries
// in the user's cache).
class MethodPluginEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("midtune-method-plugin-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ::setenv("MIDTUNE_CACHE", (dir_ / "cache").c_str(), 1);
    testing::TinyLlama tiny;
    tiny.with_tokenizer = true;
    const auto bytes = tiny.bytes();
    model_ = dir_ / "tiny.gguf";
    std::FILE* f = std::fopen(model_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  void TearDown() override {
    ::unsetenv("MIDTUNE_CACHE");
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_, model_;
};

// Chunks of a toy retrieval prompt: CALIOPE remaps positions chunk by chunk.
std::vector<BatchItem> chunked_items() {
  std::vector<BatchItem> items;
  const std::vector<std::string> pieces = {"hello world ", "world hello ", "hello hello ", "world world "};
  for (int i = 0; i < 2; ++i) {
    BatchItem item;
    item.id = "item-" + std::to_string(i);
    for (const std::string& piece : pieces) {
      const std::size_t begin = item.prompt_text.size();
      item.prompt_text += piece;
      item.chunks.push_back({begin, item.prompt_text.size()});
    }
    item.prompt_text += i == 0 ? "hello" : "world";
    item.gold = i == 0 ? "world hello" : "hello world";
    items.push_back(item);
  }
  return items;
}

TEST_F(MethodPluginEngine, RunsThroughTheEngineAsTheMethodItMimics) {
  registered_moses();
  engine::EngineBackend backend(model_);
  const auto items = chunked_items();
  const Intervention toy = moses_with_gap(5000.0);
  Intervention caliope;
  caliope.position_map = PositionMap{.kind = "moses", .gap = 5000.0};
  ASSERT_EQ(toy, caliope);
  ASSERT_NO_THROW(backend.validate(toy));

  const RunOptions tf{Mode::teacher_forced, 0};
  const auto with_toy = backend.run(toy, items, tf);
  const auto with_caliope = backend.run(caliope, items, tf);
  const auto plain = backend.run(Intervention{}, items, tf);
  ASSERT_EQ(with_toy.size(), items.size());
  double moved = 0.0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    SCOPED_TRACE(items[i].id);
    ASSERT_TRUE(std::isfinite(with_toy[i].gold_logprob));
    EXPECT_EQ(with_toy[i].gold_logprob, with_caliope[i].gold_logprob);  // bit for bit
    EXPECT_EQ(with_toy[i].gold_emitted_first, with_caliope[i].gold_emitted_first);
    moved = std::max(moved, std::fabs(with_toy[i].gold_logprob - plain[i].gold_logprob));
  }
  // Positions 5000 apart per chunk rotate every key differently: the tiny
  // random model's gold log-probabilities move by far more than rounding.
  std::printf("  moses = caliope on %zu items; largest |gold log-prob - plain| %.4f\n", items.size(), moved);
  EXPECT_GT(moved, 1e-3);

  const RunOptions gen{Mode::generate, 6};
  const auto toy_text = backend.run(toy, items, gen), caliope_text = backend.run(caliope, items, gen);
  for (std::size_t i = 0; i < items.size(); ++i) EXPECT_EQ(toy_text[i].output_text, caliope_text[i].output_text);
}

}  // namespace
}  // namespace midtune
