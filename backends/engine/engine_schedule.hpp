// What EngineBackend's run() hands its schedules (engine_backend.hpp): one
// BatchItem tokenised, checked against the model's context and with its
// intervention's mechanisms built, and the SampleOutput the schedule fills.
// Internal to engine_backend.cpp and the schedule_*.cpp files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backends/engine/engine_backend.hpp"
#include "backends/engine/engine_hooks.hpp"

namespace midtune::engine {

struct EngineBackend::Item {
  const BatchItem* item = nullptr;
  PreparedPrompt prompt;
  std::vector<std::int32_t> gold;                      // teacher_forced
  std::unique_ptr<hooks::EngineIntervention> hooked;   // interventions that read the whole prompt
  const SequenceScales* scales = nullptr;              // the hooked sequence's, or the run's plain ones
  std::size_t tokens = 0;                              // prompt + answer: the cache it needs
  std::unique_ptr<Sequence> sequence;                  // packed: while its group runs
  std::vector<std::int32_t> generated;                 // generate
  SampleOutput out;

  const ForwardHooks* hooks() const { return hooked ? hooked->hooks() : nullptr; }
  std::span<const double> positions() const {
    return hooked ? std::span<const double>(hooked->prompt_positions()) : std::span<const double>();
  }
};

}  // namespace midtune::engine
