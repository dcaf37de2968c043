// ga-run subcommands that drive the in-tree engine directly:
//   ga-run generate --model PATH --prompt TEXT [--chat] [--max-tokens N] [--threads T]
//       prints the greedy continuation;
//   ga-run bench-model --model PATH --prompt-tokens N [--threads T] [--decode-tokens D]
//       prints one JSON line with prefill and decode tokens/s;
//   ga-run devices
//       lists the CUDA devices (name, memory, compute capability) or says why there are none.
// main.cpp calls add_engine_commands(app) once; the callbacks run the
// command when CLI11 parses it.
#pragma once

#include <CLI/CLI.hpp>

namespace midtune {

void add_engine_commands(CLI::App& app);

}  // namespace midtune
