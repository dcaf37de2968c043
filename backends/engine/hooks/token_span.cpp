#include "backends/engine/hooks/token_span.hpp"

#include <stdexcept>

namespace midtune::engine::hooks {

void check_token_spans(std::span<const TokenSpan> chunks, int tokens, const std::string& what) {
  int previous_end = 0;
  for (std::size_t m = 0; m < chunks.size(); ++m) {
    const TokenSpan& c = chunks[m];
    const std::string name = what + ": chunk " + std::to_string(m) + " [" + std::to_string(c.begin) + ", " +
                             std::to_string(c.end) + ")";
    if (c.begin < 0) throw std::invalid_argument(name + " starts before token 0");
    if (c.begin >= c.end) throw std::invalid_argument(name + " is empty or reversed");
    if (c.begin < previous_end) throw std::invalid_argument(name + " overlaps or precedes the chunk before it");
    if (c.end > tokens) {
      throw std::invalid_argument(name + " ends after the prompt's " + std::to_string(tokens) + " tokens");
    }
    previous_end = c.end;
  }
}

}  // namespace midtune::engine::hooks
