// What a stored experiment ran on: the model identity and the data contents
// its fingerprint recorded (core/cli/run_setup.cpp adds them), shown by
// `status` and `report` so that a result says where it came from.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace midtune::cli {

// {"model": <ModelIdentity JSON>, "data": "<file>#<hash>" | "generated"};
// either is null for an experiment stored before they were recorded.
nlohmann::json provenance_json(const nlohmann::json& search_config);

// One line: "SmolLM2-135M-Instruct (llama, 30 layers, xxh3-128:…); data kv.jsonl#…".
std::string provenance_text(const nlohmann::json& provenance);

}  // namespace midtune::cli
