// Where model tests find the real SmolLM2 GGUF: env MIDTUNE_MODEL, else the
// set-up's cache. Empty when absent (the test then skips).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace midtune::testing {

inline std::filesystem::path test_model_path() {
  std::filesystem::path p;
  if (const char* env = std::getenv("MIDTUNE_MODEL"); env && *env) p = env;
  else if (const char* home = std::getenv("HOME"))
    p = std::filesystem::path(home) / ".cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::exists(p) ? p : std::filesystem::path();
}

}  // namespace midtune::testing
