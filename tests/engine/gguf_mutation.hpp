// Deterministic mutants of a valid GGUF: truncations, flipped header and
// tensor-table bytes, huge counts and lengths, overlapping and out-of-range
// offsets, swapped type ids, absurd metadata and non-finite weights. Each
// mutant is loaded as the engine would (GgufFile, Model, Tokenizer) and must
// either be refused with a message naming the file or run a finite forward
// pass.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <optional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/engine/gguf/gguf.hpp"
#include "backends/engine/model.hpp"
#include "backends/engine/gguf/tokenizer.hpp"
#include "tests/engine/tiny_gguf_writer.hpp"

namespace midtune::testing {

// A mutant is stored as a change to the base (a 100 MB model is not copied
// per mutant): the base cut to `size` bytes, then `patch` written at `at`.
struct Mutant {
  std::string what;
  std::uint64_t size = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t at = 0;
  std::vector<std::uint8_t> patch{};

  std::vector<std::uint8_t> apply(const std::vector<std::uint8_t>& base) const {
    std::vector<std::uint8_t> bytes(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(size, base.size())));
    if (at + patch.size() <= bytes.size()) std::copy(patch.begin(), patch.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at));
    return bytes;
  }
};

struct MutationBudget {
  int header_flips = 60;     // random bytes flipped in the header and tensor table
  std::size_t tensors = 64;  // tensors whose offset, type and shape are mutated
  std::size_t keys = 64;     // metadata keys whose value and lengths are mutated
};

class GgufMutator {
 public:
  GgufMutator(const std::vector<std::uint8_t>& base, MutationBudget budget) : base_(base), budget_(budget) {}

  std::vector<Mutant> mutants() {
    const MemoryFile file(base_);
    const GgufFile gguf(file.path());
    truncations(gguf);
    header_flips(gguf);
    counts();
    tensor_fields(gguf);
    metadata_fields(gguf);
    weights(gguf);
    return std::move(out_);
  }

 private:
  template <typename T>
  void patched(const std::string& what, std::uint64_t at, T value) {
    if (at + sizeof(T) > base_.size()) return;
    std::vector<std::uint8_t> patch(sizeof(T));
    std::memcpy(patch.data(), &value, sizeof(T));
    out_.push_back({what, std::numeric_limits<std::uint64_t>::max(), at, std::move(patch)});
  }

  void truncations(const GgufFile& gguf) {
    std::vector<std::uint64_t> sizes = {0, 3, 4, 8, 16, 23, 24, gguf.data_offset() - 1, gguf.data_offset(),
                                        gguf.data_offset() + 1, base_.size() / 2, base_.size() - 1};
    for (int i = 1; i < 8; ++i) sizes.push_back(gguf.data_offset() * i / 8);
    for (const auto size : sizes) {
      if (size >= base_.size()) continue;
      out_.push_back({"truncated to " + std::to_string(size) + " bytes", size, 0, {}});
    }
  }

  void header_flips(const GgufFile& gguf) {
    std::mt19937_64 rng(20261123);
    std::uniform_int_distribution<std::uint64_t> where(0, gguf.data_offset() - 1);
    std::uniform_int_distribution<int> mask(1, 255);
    for (int i = 0; i < budget_.header_flips; ++i) {
      const std::uint64_t at = where(rng);
      patched("byte " + std::to_string(at) + " flipped", at, static_cast<std::uint8_t>(base_[at] ^ mask(rng)));
    }
  }

  void counts() {
    for (const std::uint64_t v : {std::uint64_t{1} << 63, std::uint64_t{1} << 32, std::uint64_t{0}}) {
      patched("tensor count " + std::to_string(v), 8, v);
      patched("metadata count " + std::to_string(v), 16, v);
    }
  }

  void tensor_fields(const GgufFile& gguf) {
    const auto& tensors = gguf.tensors();
    const std::uint64_t data_size = gguf.file_size() - gguf.data_offset();
    for (std::size_t i = 0; i < tensors.size() && i < budget_.tensors; ++i) {
      const GgufTensorInfo& t = tensors[i];
      const std::string name = "tensor '" + t.name + "' ";
      const std::uint64_t dims_at = t.info_offset + 8 + t.name.size() + 4;
      const std::uint64_t type_at = dims_at + 8 * t.dims.size();
      const std::uint64_t offset_at = type_at + 4;
      patched(name + "name length 2^62", t.info_offset, std::uint64_t{1} << 62);
      patched(name + "4 billion dimensions", dims_at - 4, std::uint32_t{0xFFFFFFFF});
      patched(name + "dims[0] doubled", dims_at, t.dims[0] * 2);
      patched(name + "dims[0] = 0", dims_at, std::uint64_t{0});
      patched(name + "dims[0] = 2^62", dims_at, std::uint64_t{1} << 62);
      for (const std::uint32_t type : {0u, 1u, 2u, 3u, 8u, 12u, 14u, 30u, 6u, 1000u})
        if (type != t.type_id) patched(name + "type " + std::to_string(t.type_id) + " -> " + std::to_string(type), type_at, type);
      patched(name + "offset 0", offset_at, std::uint64_t{0});
      if (i > 0) patched(name + "offset of the previous tensor", offset_at, tensors[i - 1].offset);
      patched(name + "offset + alignment", offset_at, t.offset + gguf.alignment());
      patched(name + "offset at the end of the data", offset_at, data_size / gguf.alignment() * gguf.alignment());
      patched(name + "offset 2^63", offset_at, std::uint64_t{1} << 63);
    }
  }

  void metadata_fields(const GgufFile& gguf) {
    std::size_t done = 0;
    for (const auto& [key, value] : gguf.metadata()) {
      if (done++ >= budget_.keys) break;
      const std::string name = "key '" + key + "' ";
      patched(name + "key length 2^62", value.file_offset - key.size() - 8, std::uint64_t{1} << 62);
      patched(name + "value type 13", value.file_offset, std::uint32_t{13});
      const std::uint64_t at = value.file_offset + 4;
      if (value.is_array) {
        patched(name + "element type -> UINT64", at, std::uint32_t{10});
        patched(name + "array length 2^60", at + 4, std::uint64_t{1} << 60);
        patched(name + "array length + 1", at + 4, static_cast<std::uint64_t>(value.size()) + 1);
        if (value.element_type == GgufValueType::STRING && value.size() > 5) {
          // The sixth string's first text byte: an invalid UTF-8 lead byte.
          std::uint64_t s = at + 12;
          for (int k = 0; k < 5; ++k) s += 8 + value.strings[static_cast<std::size_t>(k)].size();
          patched(name + "string 5 length 2^40", s, std::uint64_t{1} << 40);
          if (!value.strings[5].empty()) patched(name + "string 5 text 0xFF", s + 8, std::uint8_t{0xFF});
        }
        continue;
      }
      switch (value.element_type) {
        case GgufValueType::UINT32:
          for (const std::uint32_t v : {0u, 1u, 3u, 0x80000000u, 0xFFFFFFFFu, static_cast<std::uint32_t>(value.unsigned_ints[0] + 1)})
            patched(name + "= " + std::to_string(v), at, v);
          break;
        case GgufValueType::FLOAT32:
          for (const float v : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 0.0f,
                                -1.0f, 1e30f})
            patched(name + "= " + std::to_string(v), at, v);
          break;
        case GgufValueType::STRING:
          patched(name + "string length 2^40", at, std::uint64_t{1} << 40);
          if (!value.strings[0].empty()) patched(name + "first character 'x'", at + 8, std::uint8_t{'x'});
          break;
        default: break;
      }
    }
  }

  void weights(const GgufFile& gguf) {
    // The first tensors of each storage kind: F32 norms and quantised blocks.
    int f32 = 0, quantised = 0;
    for (const auto& t : gguf.tensors()) {
      if (!t.type) continue;
      int& seen = t.type->type == GgmlType::F32 ? f32 : quantised;
      if (static_cast<std::size_t>(seen++) >= budget_.tensors) continue;
      const std::uint64_t at = gguf.data_offset() + t.offset;
      if (t.type->type == GgmlType::F32) {
        patched("tensor '" + t.name + "' element 0 = NaN", at, std::numeric_limits<float>::quiet_NaN());
        patched("tensor '" + t.name + "' element 0 = inf", at, std::numeric_limits<float>::infinity());
      } else {
        patched("tensor '" + t.name + "' block 0 scale = fp16 inf", at, std::uint16_t{0x7C00});
      }
    }
  }

  const std::vector<std::uint8_t>& base_;
  MutationBudget budget_;
  std::vector<Mutant> out_;
};

struct MutationCounts {
  int tried = 0, refused = 0, loaded = 0;
};

// Loads every mutant; a refusal must name the file, a loaded model must give
// finite logits for a short prompt.
inline MutationCounts check_mutants(const std::vector<std::uint8_t>& base, const std::vector<Mutant>& mutants) {
  MutationCounts counts;
  for (const Mutant& m : mutants) {
    ++counts.tried;
    const MemoryFile file(m.apply(base));
    const std::string path = file.path().string();
    std::optional<engine::Model> model;
    std::vector<std::int32_t> tokens;
    try {
      const GgufFile gguf(file.path());
      const Tokenizer tokenizer = Tokenizer::from_gguf(gguf);
      model.emplace(file.path());
      tokens = tokenizer.encode("hello world", true);
    } catch (const std::exception& e) {
      ++counts.refused;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << m.what << ": refusal does not name the file: " << e.what();
      continue;
    }
    ++counts.loaded;
    try {
      const auto& c = model->config();
      engine::Sequence seq(*model, static_cast<int>(tokens.size()),
                           engine::SequenceScales::ones(static_cast<int>(c.layers), static_cast<int>(c.heads)));
      const int last = static_cast<int>(tokens.size()) - 1;
      const auto logits = model->forward(seq, tokens, {}, std::span<const int>(&last, 1));
      for (float v : logits) {
        if (!std::isfinite(v)) {
          ADD_FAILURE() << m.what << ": loaded, but the forward pass gives a non-finite logit";
          break;
        }
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << m.what << ": loaded, but the forward pass failed: " << e.what();
    }
  }
  return counts;
}

}  // namespace midtune::testing
