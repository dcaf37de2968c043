// Shared by the method modules (objectives/<method>.cpp): reading a section
// of the Intervention's JSON and checking parameters against the model, each
// failure a std::invalid_argument "intervention.<field>: <reason>".
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/method_types.hpp"

namespace midtune::method_checks {

// Throws std::invalid_argument("intervention." + field + ": " + reason).
[[noreturn]] void bad(const std::string& field, const std::string& reason);

// `where` ("" for the top level) must be an object with only `known` keys.
void reject_unknown(const nlohmann::json& j, const std::string& where, std::initializer_list<const char*> known);

// The finite number at `field` ("mspoe.min_ratio": key min_ratio of `section`), or fallback when absent.
double number(const nlohmann::json& section, const std::string& field, double fallback);
// A layer index (integer in [0, 1000000]) at `field`, or fallback when absent.
int layer_index(const nlohmann::json& section, const std::string& field, int fallback);
// A list of layer indices at `field`, empty when absent.
std::vector<int> layer_list(const nlohmann::json& section, const std::string& field);

// Against the model: `layer` is one of its layers.
void check_layer(int layer, const std::string& field, const ModelShape& model);
// A non-empty list of the model's layers.
void check_layer_list(const std::vector<int>& layers, const std::string& field, const ModelShape& model);
// finite and >= lowest
void check_at_least(double value, double lowest, const std::string& field);

}  // namespace midtune::method_checks
