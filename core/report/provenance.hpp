// What a stored experiment ran on: the model identity and the data contents
// its fingerprint recorded (core/cli/run_setup.cpp adds them), shown by
// `status` and `report` so that a result says where it came from.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace midtune::report {

// {"model": <ModelIdentity JSON>, "data": "<file>#<hash>" | "generated"};
// either is null for an experiment stored before they were recorded.
nlohmann::json provenance_json(const nlohmann::json& search_config);

// One line: "SmolLM2-135M-Instruct (llama, 30 layers, xxh3-128:…); data kv.jsonl#…".
std::string provenance_text(const nlohmann::json& provenance);

// How a run computed, short: "avx2" (the CPU engine's kernel path), else the
// device ("cuda:0 …", "synthetic-test-double"); "-" for a run stored before
// runs recorded it.
std::string run_path(const nlohmann::json& run_provenance);

// One line about a run: "midtune 7dd37d8, kernel path avx2, 2 threads, AMD EPYC, host vm".
std::string run_text(const nlohmann::json& run_provenance);

}  // namespace midtune::report
