// `ga-run phs-search --model PATH [--db PATH] [options]`: the PHS channel
// search (docs/methods.md "PHS", paper 001 Alg. 1). Random strings through the
// model -> residual stream averaged per layer -> channels monotone (cubic
// fit) in more than L/4 layers -> the top_k smoothest -> each scored by the
// loss on a generated KV validation set with the channel scaled by `scale`
// (default 0) in [first_layer, last_layer] -> ranked by lowest loss. Prints
// the table with the plain model's loss as a reference line and writes the
// candidates to the results database (table phs_channels, schema v5).
// Exit: 0 done, 2 usage/configuration error (missing or unreadable model,
// bad option, too few tokens, layer range outside the model), 1 otherwise.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace midtune::cli {

struct PhsSearchArgs {
  std::string model;
  std::string db = "results.db";
  // Random strings (paper: 2000 x 1000 tokens; reference code: 200).
  int strings = 64;
  int tokens = 512;
  std::uint64_t seed = 1;
  // Analysis (backends/engine/tools/phs_channel_search.hpp).
  int skip_tokens = 30;                 // paper 30, reference code 300
  std::string smoothing = "moving-average";  // paper; savgol = reference code
  int smooth_window = 0;                // 0: 100 (paper) for moving-average, 11 for savgol
  std::string smoothness_over = "min";  // min (code, docs/methods.md) | mean (paper text)
  bool same_direction = false;          // count only the majority direction's layers (code)
  int top_k = 10;
  // Validation: the channel scaled by `scale` in [first_layer, last_layer];
  // -1 = the paper's 10..25 of 32 layers scaled to the model.
  double scale = 0.0;
  int first_layer = -1;
  int last_layer = -1;
  int val_prompts = 24;
  int val_pairs = 10;
  std::vector<double> val_positions = {0.0, 0.5, 1.0};
  std::uint64_t val_seed = 5;
  int threads = 0;  // 0 = every core
  bool quiet = false;
};

CLI::App* add_phs_search_command(CLI::App& app, PhsSearchArgs& args);
int run_phs_search(const PhsSearchArgs& args, std::ostream& out, std::ostream& err);

}  // namespace midtune::cli
