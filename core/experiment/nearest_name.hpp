// Spelling suggestions for unknown keys and enum values ("did you mean ...").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace midtune {

// Levenshtein distance (insertions, deletions, substitutions cost 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" when none is close enough to be a
// plausible misspelling (distance at most max(2, |word| / 3)).
std::string nearest_name(std::string_view word, const std::vector<std::string>& candidates);

// "a | b | c"
std::string join_names(const std::vector<std::string>& names, std::string_view separator = " | ");

}  // namespace midtune
