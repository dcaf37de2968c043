// Selection over a scored population (higher fitness is better; ties go to
// the lower position, i.e. the older individual, so results are deterministic).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/ga/rng.hpp"

namespace midtune {

enum class SelectionKind { truncation, tournament };
const char* to_string(SelectionKind kind);
SelectionKind selection_kind_from_string(const std::string& name);

// Positions of the count best (LPES Algorithm 1 line 4: the best N_pa),
// best first. count is capped at fitness.size().
std::vector<std::size_t> truncation_select(const std::vector<double>& fitness, std::size_t count);

// count winners of tournaments of tournament_size drawn with replacement.
std::vector<std::size_t> tournament_select(const std::vector<double>& fitness, std::size_t count,
                                           int tournament_size, Rng& rng);

// Elitism: positions of the k best (the same order as truncation_select).
std::vector<std::size_t> elites(const std::vector<double>& fitness, std::size_t k);

}  // namespace midtune
