#include "backends/backend.hpp"

#include <chrono>
#include <stdexcept>

namespace midtune {

nlohmann::json ModelIdentity::to_json() const {
  nlohmann::json out = {{"name", name}, {"architecture", architecture}, {"layers", layers}, {"heads", heads},
                        {"kv_heads", kv_heads}, {"hidden", hidden}, {"tokenizer_hash", tokenizer_hash}};
  // Absent when empty, so the keys of backends without them stay as written.
  if (!content_hash.empty()) out["content_hash"] = content_hash;
  if (!precision.empty()) out["precision"] = precision;
  return out;
}

std::string ModelIdentity::key() const { return to_json().dump(); }

void Backend::run_each(const std::vector<RunJob>& jobs, const RunOptions& options, const RunJobDone& done,
                       const std::atomic<int>* stop) {
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].speculative) continue;  // nothing here would be idle to run it
    RunJobResult result;
    if (stop != nullptr && stop->load() != 0) {
      result.error = std::make_exception_ptr(RunStopped("before the next evaluation"));
    } else {
      const auto start = std::chrono::steady_clock::now();
      try {
        result.outputs = run(*jobs[i].intervention, *jobs[i].batch, options);
      } catch (...) {
        result.error = std::current_exception();
      }
      result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const bool last = result.error != nullptr;
    done(i, std::move(result));
    if (last) return;
  }
}

const char* to_string(Mode mode) { return mode == Mode::generate ? "generate" : "teacher_forced"; }

Mode mode_from_string(const std::string& text) {
  if (text == "generate") return Mode::generate;
  if (text == "teacher_forced") return Mode::teacher_forced;
  throw std::invalid_argument("metric '" + text + "' is not one of generate, teacher_forced");
}

}  // namespace midtune
