// Shared by the method modules (methods/<method>.cpp): reading a section
// of the Intervention's JSON and checking parameters against the model, each
// failure a std::invalid_argument "intervention.<field>: <reason>".
#pragma once

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune::method_checks {

// Throws std::invalid_argument("intervention." + field + ": " + reason).
[[noreturn]] void bad(const std::string& field, const std::string& reason);

// A number no model can compute with (not finite, or outside what a method's
// arithmetic carries), as opposed to a malformed Intervention: a server
// answers it 422 invalid_input rather than 400.
struct InvalidValue : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// RoPE scales and Ms-PoE ratios divide position indices. Outside this range
// a float engine turns them into 0 or infinity (1e-300, 1e300) or a position
// into noise; every method's search space lies far inside (0.1 to 8).
inline constexpr double kMinScale = 1e-6;
inline constexpr double kMaxScale = 1e6;
// Throws InvalidValue unless `value` is finite and in [kMinScale, kMaxScale].
void check_scale(double value, const std::string& field);

// `where` ("" for the top level) must be an object with only `known` keys.
void reject_unknown(const nlohmann::json& j, const std::string& where, std::initializer_list<const char*> known);

// The finite number at `field` ("mspoe.min_ratio": key min_ratio of `section`), or fallback when absent.
double number(const nlohmann::json& section, const std::string& field, double fallback);
// A layer index (integer in [0, 1000000]) at `field`, or fallback when absent.
int layer_index(const nlohmann::json& section, const std::string& field, int fallback);
// A count of tokens (an integer in [1, kMaxTokenCount]) at `field`, or
// fallback when absent.
inline constexpr long long kMaxTokenCount = 1 << 24;
int token_count(const nlohmann::json& section, const std::string& field, int fallback);
// A list of layer indices at `field`, empty when absent.
std::vector<int> layer_list(const nlohmann::json& section, const std::string& field);

// Against the model: `layer` is one of its layers.
void check_layer(int layer, const std::string& field, const ModelShape& model);
// A non-empty list of the model's layers.
void check_layer_list(const std::vector<int>& layers, const std::string& field, const ModelShape& model);
// finite and >= lowest
void check_at_least(double value, double lowest, const std::string& field);

// Gene decoding: the layers first_layer..last_layer (both included) of a
// method whose genes name its layer range (SIW, PHS, the temperature).
std::vector<int> gene_layer_range(const GeneValues& genes);

}  // namespace midtune::method_checks
