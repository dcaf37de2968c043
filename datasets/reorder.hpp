// Moving the gold chunk, shared by KV pairs and MDQA documents.
#pragma once

#include <cstddef>
#include <vector>

namespace midtune::datasets {

// `items` with the element at `from` removed and re-inserted at `to`.
// Callers check both indices are < items.size().
template <typename T>
std::vector<T> moved_element(std::vector<T> items, std::size_t from, std::size_t to) {
  T moving = std::move(items[from]);
  items.erase(items.begin() + static_cast<std::ptrdiff_t>(from));
  items.insert(items.begin() + static_cast<std::ptrdiff_t>(to), std::move(moving));
  return items;
}

}  // namespace midtune::datasets
