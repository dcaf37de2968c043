// GGUF files that lie: hundreds of deterministic mutants of a tiny valid
// model (fast enough for the sanitizer build), each refused with a message
// naming the file or loaded into a model whose forward pass is finite.
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>

#include "backends/engine/ops/quantize_rows.hpp"
#include "tests/engine/gguf_mutation.hpp"
#include "tests/engine/tiny_llama_gguf.hpp"

namespace midtune::testing {
namespace {

TEST(GgufMutation, TinyModelMutantsAreRefusedOrRunFinite) {
  TinyLlama tiny;
  tiny.with_tokenizer = true;
  const auto base = tiny.bytes();
  const auto mutants = GgufMutator(base, MutationBudget{}).mutants();
  ASSERT_GE(mutants.size(), 100u);
  const MutationCounts counts = check_mutants(base, mutants);
  std::cout << "GGUF mutants: " << counts.tried << " tried, " << counts.refused << " refused, " << counts.loaded
            << " loaded\n";
  EXPECT_GT(counts.refused, counts.tried / 2);  // most lies are detectable
  EXPECT_GT(counts.loaded, 0);                  // harmless changes still load
}

// The lies the engine used to accept, each refused with the file, the field
// and the reason.
TEST(GgufMutation, SpecificLiesNameTheFieldAndReason) {
  TinyLlama tiny;
  tiny.with_tokenizer = true;
  const auto base = tiny.bytes();
  const MemoryFile base_file(base);
  const GgufFile gguf(base_file.path());
  const auto offset_of = [&](const std::string& tensor) {
    const auto& t = gguf.tensor(tensor);
    return t.info_offset + 8 + t.name.size() + 4 + 8 * t.dims.size() + 4;
  };
  const auto type_of = [&](const std::string& tensor) { return offset_of(tensor) - 4; };
  const auto value_of = [&](const std::string& key) { return gguf.find(key)->file_offset + 4; };
  struct Case {
    Mutant mutant;
    std::string message;
  };
  const auto patch = [](std::uint64_t at, auto value) {
    std::vector<std::uint8_t> bytes(sizeof value);
    std::memcpy(bytes.data(), &value, sizeof value);
    return Mutant{"", std::numeric_limits<std::uint64_t>::max(), at, bytes};
  };
  const auto& tokens = gguf.find("tokenizer.ggml.tokens")->strings;
  const std::uint64_t token3_text = value_of("tokenizer.ggml.tokens") + 12 + (8 + tokens[0].size()) +
                                    (8 + tokens[1].size()) + (8 + tokens[2].size()) + 8;
  const std::vector<Case> cases = {
      {patch(offset_of("output_norm.weight"), std::uint64_t{0}), "overlaps tensor 'token_embd.weight'"},
      {patch(type_of("token_embd.weight"), std::uint32_t{3}), "its type or shape does not match the stored data"},
      {patch(16, std::uint64_t{0}),  // the metadata count, after magic, version and tensor count
       "the header declares 0 metadata entries at byte 16; if that count is wrong"},
      {patch(offset_of("token_embd.weight") - 4 - 8, std::uint64_t{0}),
       "tensor 'token_embd.weight' dimension 1 is 0: the tensor would hold nothing"},
      {patch(value_of("llama.block_count"), std::uint32_t{0x80000000u}),
       "'llama.block_count' = 2147483648 but the file holds tensors for 2 layers"},
      {patch(value_of("tokenizer.ggml.bos_token_id"), std::uint32_t{0xFFFFFFFFu}),
       "'tokenizer.ggml.bos_token_id' = 4294967295 is not a token id"},
      {patch(value_of("tokenizer.ggml.eos_token_id"), std::uint32_t{40}),
       "tokenizer.ggml.eos_token_id 40 is outside the vocabulary of 40 tokens"},
      {patch(token3_text, std::uint8_t{0xC3}), "tokenizer.ggml.tokens[3] is not valid UTF-8 at byte 0"},
      {patch(gguf.data_offset() + gguf.tensor("blk.1.attn_norm.weight").offset + 8,
             std::numeric_limits<float>::quiet_NaN()),
       "tensor 'blk.1.attn_norm.weight' has a non-finite value (NaN or infinity) at element 2"},
      {patch(gguf.data_offset() + gguf.tensor("blk.0.attn_q.weight").offset + 20 * 3 + 2, std::uint16_t{0x7C00}),
       "in the Q4_1 block of elements 96..127"},
  };
  for (const Case& c : cases) {
    const MemoryFile file(c.mutant.apply(base));
    try {
      const GgufFile mutated(file.path());
      const Tokenizer tokenizer = Tokenizer::from_gguf(mutated);
      const engine::Model model(file.path());
      ADD_FAILURE() << "accepted; expected: " << c.message;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(file.path().string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

TEST(GgufMutation, NonFiniteActivationIsAnErrorNotUndefinedBehaviour) {
  engine::QuantizedRows out;
  std::vector<float> row(64, 0.5f);
  row[37] = std::numeric_limits<float>::infinity();
  try {
    engine::quantize_rows(row.data(), 1, 64, 64, out);
    FAIL() << "an infinite activation was quantised";
  } catch (const std::domain_error& e) {
    EXPECT_NE(std::string(e.what()).find("row 0, column 37"), std::string::npos) << e.what();
  }
  row[37] = 1e-39f;  // every value tiny: 1 / scale would overflow; the block quantises to zeros
  std::fill(row.begin(), row.end(), 1e-39f);
  engine::quantize_rows(row.data(), 1, 64, 64, out);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out.row_q(0)[i], 0);
}

// Rows are quantised in parallel chunks: the error still names the first bad
// element in row order (here row 20 of 100, with a NaN later at row 70 in a
// chunk that may run first), and many rows at once give the bytes of one at a time.
TEST(GgufMutation, ParallelQuantisationNamesTheFirstNonFiniteRowAndKeepsTheBytes) {
  const int rows = 100, cols = 96;
  std::vector<float> x(static_cast<std::size_t>(rows) * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  engine::QuantizedRows all;
  engine::quantize_rows(x.data(), rows, cols, cols, all);
  for (int r = 0; r < rows; r += 33) {
    engine::QuantizedRows one;
    engine::quantize_rows(x.data() + static_cast<std::size_t>(r) * cols, 1, cols, cols, one);
    for (int i = 0; i < 3 * 32; ++i) ASSERT_EQ(all.row_q(r)[i], one.row_q(0)[i]) << "row " << r;
    for (int b = 0; b < 3; ++b) ASSERT_EQ(all.row_d(r)[b], one.row_d(0)[b]) << "row " << r;
  }
  x[70 * cols + 5] = std::numeric_limits<float>::quiet_NaN();
  x[20 * cols + 61] = -std::numeric_limits<float>::infinity();
  try {
    engine::quantize_rows(x.data(), rows, cols, cols, all);
    FAIL() << "a non-finite activation was quantised";
  } catch (const std::domain_error& e) {
    EXPECT_NE(std::string(e.what()).find("row 20, column 61"), std::string::npos) << e.what();
  }
}

// Every quantised type's fp16 scale fields (offsets in ggml's block structs)
// are checked at load: an infinite one in the second block is refused naming
// the tensor, the type and the block; the all-zero file loads.
TEST(GgufMutation, EveryQuantisedTypesScaleFieldsAreCheckedForNonFiniteValues) {
  struct TypeCase {
    std::uint32_t type_id;
    const char* name;
    std::uint64_t block_elems, block_bytes;
    std::vector<std::size_t> scale_fields;  // byte offsets of the fp16 d / min / dmin in a block
  };
  const std::vector<TypeCase> cases = {
      {2, "Q4_0", 32, 18, {0}},      {3, "Q4_1", 32, 20, {0, 2}},    {6, "Q5_0", 32, 22, {0}},
      {7, "Q5_1", 32, 24, {0, 2}},   {8, "Q8_0", 32, 34, {0}},       {10, "Q2_K", 256, 84, {80, 82}},
      {11, "Q3_K", 256, 110, {108}}, {12, "Q4_K", 256, 144, {0, 2}}, {13, "Q5_K", 256, 176, {0, 2}},
      {14, "Q6_K", 256, 210, {208}}, {20, "IQ4_NL", 32, 18, {0}},    {23, "IQ4_XS", 256, 136, {0}},
  };
  for (const TypeCase& c : cases) {
    for (std::optional<std::size_t> field : std::vector<std::optional<std::size_t>>{std::nullopt, 0, 1}) {
      if (field && *field >= c.scale_fields.size()) continue;
      std::vector<std::uint8_t> data(2 * c.block_bytes, 0);
      if (field) {
        const std::uint16_t infinity = 0x7C00;  // fp16 +inf
        std::memcpy(&data[c.block_bytes + c.scale_fields[*field]], &infinity, sizeof infinity);
      }
      TinyGgufWriter writer;
      writer.add_tensor("weights", {2 * c.block_elems}, c.type_id, data);
      const MemoryFile file(writer.bytes());
      const GgufFile gguf(file.path());
      const GgufTensorInfo& info = gguf.tensor("weights");
      if (!field) {
        EXPECT_NO_THROW(gguf.require_finite(info)) << c.name;
        continue;
      }
      const std::string block = "in the " + std::string(c.name) + " block of elements " +
                                std::to_string(c.block_elems) + ".." + std::to_string(2 * c.block_elems - 1);
      try {
        gguf.require_finite(info);
        ADD_FAILURE() << c.name << ": an infinite scale field at byte " << c.scale_fields[*field] << " was accepted";
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'weights' has a non-finite value"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(block), std::string::npos) << e.what();
      }
    }
  }
}

TEST(GgufMutation, UnmutatedTinyModelLoads) {
  TinyLlama tiny;
  tiny.with_tokenizer = true;
  const MutationCounts counts = check_mutants(tiny.bytes(), {Mutant{"unmutated"}});
  EXPECT_EQ(counts.loaded, 1);
}

}  // namespace
}  // namespace midtune::testing
