// What computed a run's rows, stored with every run (runs.provenance) and
// shown by `status` and `report`: the program (git describe at build time,
// build options), the machine (host, CPU model) and how the backend
// computes (Backend::execution(): device, kernel path, threads, precision).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"

namespace midtune::cli {

// {"version", "build_type", "compiler", "cuda", "sanitize"}.
nlohmann::json build_info();

// /proc/cpuinfo's "model name" (the first one), or "unknown".
std::string cpu_model();

// {"build": build_info(), "host", "cpu", "execution"} for a run on `backend`.
nlohmann::json run_provenance(const Backend& backend);

}  // namespace midtune::cli
