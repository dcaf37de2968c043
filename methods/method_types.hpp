// The vocabulary every method module speaks (methods/<method>.hpp): gene
// schemas and values, the model's shape for validation. It sits at the bottom
// with the Intervention contract and depends only on the standard library and
// nlohmann/json, so backends, the experiment loader and the objectives can
// all read a method's facts from its one module.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace midtune {

// A gene value: numbers for integer/real genes, text for categorical ones.
using GeneValue = std::variant<double, std::string>;
nlohmann::json gene_value_to_json(const GeneValue& value);  // integral numbers as integers
nlohmann::json gene_number_to_json(double number);
std::string gene_value_to_string(const GeneValue& value);

enum class GeneType { integer, real, categorical };
const char* to_string(GeneType type);

// What a method declares about one of its genes.
struct GeneSchema {
  std::string name;
  GeneType type = GeneType::real;
  // The paper's value; nullopt when the paper gives none and the layer range
  // depends on the model, so the experiment must set it.
  std::optional<GeneValue> paper_default;
  // Hard bounds for integer/real genes (inclusive).
  double lower = -std::numeric_limits<double>::infinity();
  double upper = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // categorical: the allowed values
  std::string meaning;               // one line, for messages and docs
  // > 0: paper_default is a layer of the paper's model, which has this many
  // layers; a model of another depth takes the same fraction of its own
  // (paper_layer_for_depth), as its paper setting.
  int paper_model_layers = 0;
};

// Layer `paper_layer` of a `paper_layers`-layer model at the same depth
// fraction of a `layers`-layer one, rounded to the nearest layer.
int paper_layer_for_depth(int paper_layer, int paper_layers, int layers);

// Two genes of a method whose values must be ordered: lower <= upper
// (e.g. mspoe min_ratio <= max_ratio, siw first_layer <= last_layer).
struct GeneOrder {
  std::string lower;
  std::string upper;
};

// The value of every gene of one method for one genome.
class GeneValues {
 public:
  explicit GeneValues(std::string method) : method_(std::move(method)) {}
  void set(const std::string& name, GeneValue value) { values_[name] = std::move(value); }
  // Throws std::logic_error naming the method and gene when absent or of the other type.
  double number(const std::string& name) const;
  int integer(const std::string& name) const;
  const std::string& text(const std::string& name) const;

 private:
  const GeneValue& at(const std::string& name) const;
  std::string method_;
  std::map<std::string, GeneValue> values_;
};

// How the forward pass realises a method: the mechanism its Intervention
// field drives, named by what the model does (backends/engine/model.hpp,
// ForwardHooks), never by method. Several methods may drive one (PI and LPES
// both set RoPE scales), and a new method that reuses a mechanism needs
// nothing new in any backend.
enum class Mechanism {
  layer_rope_scales,        // RoPE scales per layer / head, fixed per sequence (LPES, PI)
  prompt_head_rope_scales,  // per-head RoPE scales decided in the prefill from the last query's rows (Ms-PoE)
  prompt_positions,         // the prompt's positions remapped from its chunks (CALIOPE)
  key0_weight,              // key 0's attention weight rescaled per query, from the prefill's last row (SIW)
  qk_channel_scaling,       // one Q/K input channel scaled, keys re-cached, last rows recomputed (PHS)
  layer_score_scales,       // the attention logits of some layers scaled, fixed per sequence (temperature)
  distance_remap,           // far keys seen at remapped relative positions, near ones at their own (SelfExtend, STRING)
};
const char* to_string(Mechanism mechanism);

// What running an intervention needs of a backend; each mechanism's needs
// are stated once (mechanism_needs), and an Intervention's are the union over
// the mechanisms of the fields it sets (intervention_needs, methods/registry.hpp).
struct MechanismNeeds {
  // The prompt is the sequence's first forward call and nothing else: the
  // mechanism is decided from the whole prompt (its chunks, its last query),
  // so gold tokens come in a second call and no prefix is shared by items.
  bool prompt_alone = false;
  // That first call is not split into prefill chunks: the mechanism reads
  // the last query's attention over every prompt key in each layer.
  bool one_call_prefill = false;
  // On a GPU, rows go to the host and a decision comes back within the
  // pass, which synchronises the device stream.
  bool host_round_trip = false;
  // It scales or remaps the positions RoPE rotates by: the model must have
  // RoPE (MPT's ALiBi has none), or the method is refused by name.
  bool rope_positions = false;

  MechanismNeeds& operator|=(const MechanismNeeds& other);
  bool operator==(const MechanismNeeds&) const = default;
};
MechanismNeeds mechanism_needs(Mechanism mechanism);
// Why two mechanisms cannot act in one forward pass, or nullptr where they
// can (symmetric).
const char* mechanism_conflict(Mechanism a, Mechanism b);

// What validation needs to know of a model.
struct ModelShape {
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int hidden = 0;
  // Whether positions enter through RoPE (false: MPT's ALiBi), and the
  // architecture's name for messages (empty: not known, e.g. a server's).
  bool rope = true;
  std::string architecture;
};

}  // namespace midtune
