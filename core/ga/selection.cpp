#include "core/ga/selection.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace midtune {

const char* to_string(SelectionKind kind) {
  return kind == SelectionKind::truncation ? "truncation" : "tournament";
}

SelectionKind selection_kind_from_string(const std::string& name) {
  if (name == "truncation") return SelectionKind::truncation;
  if (name == "tournament") return SelectionKind::tournament;
  throw std::invalid_argument("selection: unknown kind '" + name +
                              "' (expected truncation or tournament)");
}

std::vector<std::size_t> truncation_select(const std::vector<double>& fitness, std::size_t count) {
  std::vector<std::size_t> order(fitness.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Stable: equal fitness keeps the lower position first.
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return fitness[a] > fitness[b]; });
  order.resize(std::min(count, order.size()));
  return order;
}

std::vector<std::size_t> tournament_select(const std::vector<double>& fitness, std::size_t count,
                                           int tournament_size, Rng& rng) {
  if (fitness.empty()) throw std::invalid_argument("tournament selection: empty population");
  if (tournament_size < 1) throw std::invalid_argument("tournament selection: size must be >= 1");
  std::vector<std::size_t> winners;
  winners.reserve(count);
  for (std::size_t n = 0; n < count; ++n) {
    std::size_t best = rng.index(fitness.size());
    for (int round = 1; round < tournament_size; ++round) {
      const std::size_t challenger = rng.index(fitness.size());
      if (fitness[challenger] > fitness[best] ||
          (fitness[challenger] == fitness[best] && challenger < best)) {
        best = challenger;
      }
    }
    winners.push_back(best);
  }
  return winners;
}

std::vector<std::size_t> elites(const std::vector<double>& fitness, std::size_t k) {
  return truncation_select(fitness, k);
}

}  // namespace midtune
