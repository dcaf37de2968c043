// Writes the small random-weight GGUFs of tests/engine/tiny_arch_gguf.hpp to
// a directory, for the numpy reference (tests/reference/make_arch_fixtures.py)
// and for end-to-end runs of ga-run on each architecture.
// Usage: write_tiny_arch_ggufs OUT_DIR [VOCAB_DIR]   (VOCAB_DIR default:
// $MIDTUNE_VOCAB_DIR, else ~/.cache/midtune/llama.cpp-vocab-0.3.36)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/engine/tiny_arch_gguf.hpp"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [VOCAB_DIR]\n", argv[0]);
    return 2;
  }
  fs::path vocab_dir;
  if (argc > 2) vocab_dir = argv[2];
  else if (const char* env = std::getenv("MIDTUNE_VOCAB_DIR"); env && *env) vocab_dir = env;
  else if (const char* home = std::getenv("HOME")) vocab_dir = fs::path(home) / ".cache/midtune/llama.cpp-vocab-0.3.36";
  try {
    fs::create_directories(argv[1]);
    for (const auto& spec : midtune::testing::tiny_arch_specs()) {
      const midtune::GgufFile vocab(vocab_dir / spec.vocab_file);
      const fs::path out = fs::path(argv[1]) / (spec.name + ".gguf");
      midtune::testing::TinyGgufWriter::write(out, midtune::testing::tiny_arch_gguf(spec, vocab));
      std::printf("%s\n", out.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_tiny_arch_ggufs: %s\n", e.what());
    return 1;
  }
  return 0;
}
