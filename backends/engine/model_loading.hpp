// Reading a model's tensors from its GGUF, shared by every device's model
// (model.cpp, whatever the device): the shape and
// type checks, the vectors, Q/K/V biases, the RoPE frequencies, and the rule
// that every tensor of the file is one the forward pass reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/engine/gguf/gguf.hpp"

namespace midtune::engine {

// "<file>: tensor '<name>'" for error messages.
std::string tensor_where(const GgufFile& file, const std::string& name);

// The tensor `name` with its dims checked (dims[0] == cols, dims[1] == rows),
// a supported type and finite values.
const GgufTensorInfo& matrix_tensor(const GgufFile& file, const std::string& name, std::uint64_t cols,
                                    std::uint64_t rows);

// A vector tensor dequantised to float.
std::vector<float> vector_tensor(const GgufFile& file, const std::string& name, std::uint64_t size);
// The same, empty where the file has no such tensor (MPT's optional biases).
std::vector<float> optional_vector_tensor(const GgufFile& file, const std::string& name, std::uint64_t size);

// Q/K/V biases (qwen2), one vector over the packed Q|K|V rows; empty when
// the file has none (a missing one of the three counts as zeros).
std::vector<float> qkv_bias(const GgufFile& file, const std::string& prefix, std::uint64_t q_rows,
                            std::uint64_t kv_rows);

// Throws when the file holds a tensor the forward pass would ignore.
void require_known_tensors(const GgufFile& file, const ModelConfig& c);

// Per dimension pair i: base^(-2i / rope_dims) * freq_scale / freq_factor[i]
// (local: the local layers' base alone).
std::vector<double> rope_inverse_frequencies(const GgufFile& file, const ModelConfig& c, bool local = false);

// The metadata checks every device makes before sizing anything: RoPE
// dimensions, a head dimension the device supports (at most
// `max_head_dim`), block_count against the tensors present, known tensors.
void check_model_shape(const GgufFile& file, const ModelConfig& c, std::uint32_t max_head_dim);

}  // namespace midtune::engine
