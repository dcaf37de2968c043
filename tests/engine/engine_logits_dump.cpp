// Writes the engine's last-position logits for a list of prompts, for
// tests/reference/precision_report.py (the per-type worst logit difference to
// the numpy fp32 forward of the same GGUF). Not a test.
//   engine_logits_dump MODEL TOKENS OUT      (MIDTUNE_ISA caps the ISA)
// TOKENS: one prompt per line, token ids separated by spaces. OUT: for each
// prompt, vocab float32 values (native byte order).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "backends/engine/model.hpp"

int main(int argc, char** argv) {
  using namespace midtune::engine;
  if (argc != 4) {
    std::cerr << "usage: engine_logits_dump MODEL TOKENS OUT   (MIDTUNE_ISA=scalar|avx2|avxvnni|avx512 caps the ISA)\n";
    return 2;
  }
  try {
    Model model(argv[1], best_isa());
    std::ifstream in(argv[2]);
    if (!in) throw std::runtime_error(std::string(argv[2]) + ": cannot open");
    std::ofstream out(argv[3], std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ids(line);
      std::vector<std::int32_t> tokens;
      for (std::int32_t id; ids >> id;) tokens.push_back(id);
      if (tokens.empty()) continue;
      Sequence seq(
          model, static_cast<int>(tokens.size()),
          SequenceScales::ones(static_cast<int>(model.config().layers), static_cast<int>(model.config().heads)));
      const int last = static_cast<int>(tokens.size()) - 1;
      const std::vector<float> logits = model.forward(seq, tokens, {}, std::span<const int>(&last, 1));
      out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
    }
    std::cerr << argv[1] << ": " << model.device().name() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "engine_logits_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
