#include "core/ga/sweep_strategies.hpp"

#include <cmath>
#include <stdexcept>

#include "core/ga/state_json.hpp"

namespace midtune {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& reason) {
  throw std::invalid_argument(where + ": " + reason);
}

int positive_int(const std::string& where, const nlohmann::json& value) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < 1) fail(where, "must be an integer >= 1");
  return value.get<int>();
}

void check_kind(const std::string& kind, const nlohmann::json& value) {
  if (value != kind) fail(kind + ".kind", "must be \"" + kind + "\"");
}

}  // namespace

void to_json(nlohmann::json& out, const GridConfig& config) {
  out = {{"values", config.values}, {"batch_size", config.batch_size}, {"max_points", config.max_points}};
}

void from_json(const nlohmann::json& in, GridConfig& config) {
  if (!in.is_object()) fail("grid", "expected an object");
  for (const auto& [key, value] : in.items()) {
    if (key == "kind") {
      check_kind("grid", value);
    } else if (key == "values") {
      if (!value.is_object()) fail("grid.values", "must map gene names to lists of values");
      config.values.clear();
      for (const auto& [gene, list] : value.items()) {
        if (!list.is_array() || list.empty()) fail("grid.values." + gene, "must be a non-empty list");
        config.values[gene] = list.get<std::vector<nlohmann::json>>();
      }
    } else if (key == "batch_size") {
      config.batch_size = positive_int("grid.batch_size", value);
    } else if (key == "max_points") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 1) fail("grid.max_points", "must be >= 1");
      config.max_points = value.get<std::int64_t>();
    } else {
      fail("grid." + key, "is not a field (expected values, batch_size, max_points)");
    }
  }
}

void to_json(nlohmann::json& out, const RandomConfig& config) {
  out = {{"count", config.count}, {"batch_size", config.batch_size}};
}

void from_json(const nlohmann::json& in, RandomConfig& config) {
  if (!in.is_object()) fail("random", "expected an object");
  for (const auto& [key, value] : in.items()) {
    if (key == "kind") {
      check_kind("random", value);
    } else if (key == "count") {
      config.count = positive_int("random.count", value);
    } else if (key == "batch_size") {
      config.batch_size = positive_int("random.batch_size", value);
    } else {
      fail("random." + key, "is not a field (expected count, batch_size)");
    }
  }
}

SweepStrategy::SweepStrategy(GenomeSpace space, std::string kind, nlohmann::json config_json,
                             int batch_size, std::uint64_t seed)
    : space_(std::move(space)),
      rng_(seed),
      kind_(std::move(kind)),
      config_json_(std::move(config_json)),
      batch_size_(batch_size) {
  if (batch_size_ < 1) fail(kind_ + ".batch_size", "must be >= 1");
}

std::vector<Candidate> SweepStrategy::ask() {
  if (!has_pending_) {
    pending_.clear();
    Genome genome;
    while (static_cast<int>(pending_.size()) < batch_size_ && next_genome(genome)) {
      pending_.push_back(next_candidate(next_id_, genome, origin()));
    }
    has_pending_ = !pending_.empty();
  }
  return pending_;
}

void SweepStrategy::tell(const std::vector<double>& fitness) {
  if (!has_pending_) throw std::logic_error(kind_ + ": tell() without a pending ask()");
  if (fitness.size() != pending_.size()) {
    throw std::invalid_argument(kind_ + ": tell() got " + std::to_string(fitness.size()) +
                                " fitness values for " + std::to_string(pending_.size()) +
                                " candidates");
  }
  for (double value : fitness) {
    if (std::isnan(value)) throw std::invalid_argument(kind_ + ": fitness is NaN (use -infinity)");
  }
  last_batch_.clear();
  for (const Candidate& candidate : pending_) last_batch_.push_back(candidate.id);
  pending_.clear();
  has_pending_ = false;
  ++generation_;
}

bool SweepStrategy::done() const { return !has_pending_ && exhausted(); }

nlohmann::json SweepStrategy::save_state() const {
  nlohmann::json pending = nlohmann::json::array();
  for (const Candidate& candidate : pending_) pending.push_back(candidate_to_json(candidate));
  return {{"strategy", kind_},        {"version", 1},          {"config", config_json_},
          {"genome_size", space_.size()}, {"rng", rng_.save()},  {"generation", generation_},
          {"next_id", next_id_},      {"pending", pending},    {"has_pending", has_pending_},
          {"last_batch", last_batch_}, {"cursor", save_cursor()}};
}

void SweepStrategy::load_state(const nlohmann::json& state) {
  StateReader reader(kind_, state, config_json_, space_);
  Rng rng;
  rng.load(reader.field("rng"));
  std::vector<Candidate> pending;
  for (const nlohmann::json& item : reader.array("pending")) pending.push_back(reader.candidate(item));
  std::vector<std::int64_t> last_batch;
  for (const nlohmann::json& id : reader.array("last_batch")) {
    if (!id.is_number_integer()) fail(kind_ + " state", "last_batch holds a non-integer id");
    last_batch.push_back(id.get<std::int64_t>());
  }
  const auto generation = static_cast<int>(reader.integer(state, "generation"));
  const std::int64_t next_id = reader.integer(state, "next_id");
  const bool has_pending = reader.boolean("has_pending");
  load_cursor(reader.field("cursor"));
  rng_ = rng;
  pending_ = std::move(pending);
  last_batch_ = std::move(last_batch);
  generation_ = generation;
  next_id_ = next_id;
  has_pending_ = has_pending;
}

GridStrategy::GridStrategy(GenomeSpace space, GridConfig config, std::uint64_t seed)
    : SweepStrategy(std::move(space), "grid", nlohmann::json(config), config.batch_size, seed) {
  for (const auto& [name, list] : config.values) {
    if (!space_.find(name)) {
      fail("grid.values." + name, "no such gene (genes: " + nlohmann::json(space_.names()).dump() + ")");
    }
  }
  for (std::size_t i = 0; i < space_.size(); ++i) {
    const Gene& gene = space_.gene(i);
    std::vector<double> axis;
    auto listed = config.values.find(gene_name(gene));
    if (listed == config.values.end()) {
      for (std::int64_t index = 0; index < grid_size(gene); ++index) axis.push_back(grid_value(gene, index));
    } else {
      for (const nlohmann::json& value : listed->second) {
        try {
          axis.push_back(gene_value_from_json(gene, value));
        } catch (const std::invalid_argument& error) {
          fail("grid.values." + gene_name(gene), error.what());
        }
      }
    }
    if (total_ > config.max_points / static_cast<std::int64_t>(axis.size())) {
      fail("grid", "the cartesian product exceeds max_points = " + std::to_string(config.max_points) +
                       " (list fewer values per gene)");
    }
    total_ *= static_cast<std::int64_t>(axis.size());
    axes_.push_back(std::move(axis));
  }
  skip_invalid();
}

Genome GridStrategy::genome_at(std::int64_t position) const {
  Genome genome(axes_.size());
  for (std::size_t i = axes_.size(); i-- > 0;) {  // last gene varies fastest
    const auto radix = static_cast<std::int64_t>(axes_[i].size());
    genome[i] = axes_[i][static_cast<std::size_t>(position % radix)];
    position /= radix;
  }
  return genome;
}

void GridStrategy::skip_invalid() {
  while (cursor_ < total_ && !space_.satisfies_predicate(genome_at(cursor_))) ++cursor_;
}

bool GridStrategy::next_genome(Genome& out) {
  if (cursor_ >= total_) return false;
  out = genome_at(cursor_++);
  skip_invalid();  // so exhausted(), hence done(), is exact
  return true;
}

void GridStrategy::load_cursor(const nlohmann::json& cursor) {
  if (!cursor.is_number_integer() || cursor.get<std::int64_t>() < 0 || cursor.get<std::int64_t>() > total_) {
    fail("grid state", "cursor " + cursor.dump() + " is outside 0.." + std::to_string(total_));
  }
  cursor_ = cursor.get<std::int64_t>();
  skip_invalid();
}

RandomStrategy::RandomStrategy(GenomeSpace space, RandomConfig config, std::uint64_t seed)
    : SweepStrategy(std::move(space), "random", nlohmann::json(config), config.batch_size, seed),
      count_(config.count) {
  if (count_ < 1) fail("random.count", "must be >= 1");
}

bool RandomStrategy::next_genome(Genome& out) {
  if (drawn_ >= count_) return false;
  out = space_.random_genome(rng_);
  ++drawn_;
  return true;
}

void RandomStrategy::load_cursor(const nlohmann::json& cursor) {
  if (!cursor.is_number_integer() || cursor.get<std::int64_t>() < 0 || cursor.get<std::int64_t>() > count_) {
    fail("random state", "cursor " + cursor.dump() + " is outside 0.." + std::to_string(count_));
  }
  drawn_ = cursor.get<std::int64_t>();
}

}  // namespace midtune
