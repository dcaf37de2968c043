#include "backends/engine/hooks/mspoe_order.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace midtune::engine::hooks {
namespace {

[[noreturn]] void bad(const std::string& field, const std::string& reason) {
  throw std::invalid_argument("mspoe." + field + ": " + reason);
}

// rank[h] = place of head h when sorted by value, largest first, ties by lower h.
std::vector<int> rank_descending(const std::vector<double>& value) {
  std::vector<int> order(value.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return value[a] > value[b]; });
  std::vector<int> rank(value.size());
  for (std::size_t i = 0; i < order.size(); ++i) rank[order[i]] = static_cast<int>(i);
  return rank;
}

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

double awareness_score(std::span<const float> row, double alpha) {
  if (row.empty()) return 0.0;
  const double n = static_cast<double>(row.size());
  const double threshold = alpha / n;  // alpha x the row mean (a softmax row sums to 1)
  std::size_t count = 0;
  for (float a : row) count += static_cast<double>(a) > threshold ? 1 : 0;
  return static_cast<double>(count) / n;
}

double row_entropy(std::span<const float> row) {
  double h = 0.0;
  for (float a : row) {
    if (a > 0.0f) h -= static_cast<double>(a) * std::log(static_cast<double>(a));
  }
  return h;
}

std::vector<double> spaced_ratios(const MsPoe& mspoe, int heads) {
  std::vector<double> r(static_cast<std::size_t>(heads));
  const double span = mspoe.max_ratio - mspoe.min_ratio;
  for (int i = 0; i < heads; ++i) {
    if (mspoe.reference_spacing) {
      r[i] = mspoe.min_ratio + span * i / heads;
    } else {
      r[i] = heads == 1 ? mspoe.min_ratio : mspoe.min_ratio + i * span / (heads - 1);  // eq. 2
    }
  }
  return r;
}

std::vector<int> ratio_index_per_head(const MsPoe& mspoe, std::span<const float> rows, int heads,
                                      int keys, int layer) {
  if (heads <= 0 || keys <= 0 || rows.size() != static_cast<std::size_t>(heads) * keys) {
    throw std::invalid_argument("mspoe: expected " + std::to_string(heads) + " x " + std::to_string(keys) +
                                " attention values, got " + std::to_string(rows.size()));
  }
  auto row = [&](int h) { return rows.subspan(static_cast<std::size_t>(h) * keys, keys); };
  std::vector<int> index(static_cast<std::size_t>(heads));
  std::iota(index.begin(), index.end(), 0);
  if (mspoe.order == "sequential") return index;
  if (mspoe.order == "random") {
    // Fisher-Yates over ratio indices, seeded by (seed, layer).
    std::uint64_t state = mspoe.seed ^ (0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(layer + 1));
    for (int i = heads - 1; i > 0; --i) {
      const int j = static_cast<int>(splitmix64(state) % static_cast<std::uint64_t>(i + 1));
      std::swap(index[i], index[j]);
    }
    return index;
  }
  std::vector<double> value(static_cast<std::size_t>(heads));
  for (int h = 0; h < heads; ++h) {
    value[h] = mspoe.order == "entropy" ? row_entropy(row(h)) : awareness_score(row(h), mspoe.alpha);
  }
  if (mspoe.order == "awareness" || mspoe.order == "entropy") return rank_descending(value);
  if (mspoe.order == "reference-argsort") {
    // argsort(-S_p) used directly as the per-head index (the public code).
    std::stable_sort(index.begin(), index.end(), [&](int a, int b) { return value[a] > value[b]; });
    return index;
  }
  bad("order", "'" + mspoe.order + "' is not one of " + mspoe_order_list());
}

std::vector<double> head_ratios(const MsPoe& mspoe, std::span<const float> rows, int heads, int keys,
                                int layer) {
  const std::vector<double> r = spaced_ratios(mspoe, heads);
  const std::vector<int> index = ratio_index_per_head(mspoe, rows, heads, keys, layer);
  std::vector<double> out(static_cast<std::size_t>(heads));
  for (int h = 0; h < heads; ++h) out[h] = r[index[h]];
  return out;
}

}  // namespace midtune::engine::hooks
