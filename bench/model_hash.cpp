// What a model's content hash costs (backends/engine/gguf/content_hash.hpp):
// the first load of a file version hashes every byte; later loads read the
// cached entry. Measured against `xxhsum -H2` (XXH128 of the same bytes, the
// xxhash package's own single-threaded tool) in the same run.
//   build/bench/model_hash --model FILE [--repeats 3] [--drop-caches]
// --drop-caches (root) empties the page cache before each timed pass, so the
// figures are from disk rather than from memory.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>

#include "backends/engine/gguf/content_hash.hpp"
#include "backends/engine/gguf/gguf.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void drop_page_cache() {
  ::sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
}

// Wall seconds of `xxhsum -H2 file`, or a negative value when it is missing.
double peer_seconds(const std::string& file) {
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(("xxhsum -H2 '" + file + "' > /dev/null 2>&1").c_str());
  return status == 0 ? seconds_since(start) : -1.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"model_hash: the content hash of a model file vs xxhsum -H2, and a cached look-up"};
  std::string model;
  int repeats = 3;
  bool drop = false;
  app.add_option("--model", model, "GGUF file")->required()->check(CLI::ExistingFile);
  app.add_option("--repeats", repeats, "timed passes (best kept)")->check(CLI::Range(1, 100));
  app.add_flag("--drop-caches", drop, "empty the page cache before each pass (root)");
  CLI11_PARSE(app, argc, argv);

  double ours = 1e300, peer = 1e300;
  for (int r = 0; r < repeats; ++r) {
    // Opened after the drop: pages a live mapping holds are not dropped.
    if (drop) drop_page_cache();
    const auto start = std::chrono::steady_clock::now();
    const std::string hash = midtune::content_hash(midtune::GgufFile(model).bytes());
    ours = std::min(ours, seconds_since(start));
    if (drop) drop_page_cache();
    const double p = peer_seconds(model);
    if (p >= 0) peer = std::min(peer, p);
  }
  const midtune::GgufFile file(model);
  const double gb = static_cast<double>(file.file_size()) / 1e9;
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("midtune-model-hash-bench-" + std::to_string(::getpid()));
  midtune::gguf_content_hash(file, cache);  // fills the entry
  const auto start = std::chrono::steady_clock::now();
  midtune::gguf_content_hash(file, cache);
  const double cached = seconds_since(start);
  std::filesystem::remove_all(cache);

  std::printf("file %s: %.3f GB, page cache %s\n", model.c_str(), gb, drop ? "dropped before each pass" : "warm");
  std::printf("%-28s %10s %10s\n", "", "seconds", "s per GB");
  std::printf("%-28s %10.3f %10.3f\n", "midtune content_hash", ours, ours / gb);
  if (peer < 1e300) {
    std::printf("%-28s %10.3f %10.3f\n", "xxhsum -H2 (peer)", peer, peer / gb);
    std::printf("ratio (peer / midtune): %.2fx\n", peer / ours);
  } else {
    std::printf("xxhsum not found (apt-get install xxhash): no peer figure\n");
  }
  std::printf("cached look-up: %.1f us\n", cached * 1e6);
  return 0;
}
