// Non-evolutionary strategies behind the ask/tell contract:
//  `grid`:   the cartesian product of listed values per gene, in
//            mixed-radix order (last gene fastest), skipping combinations
//            the space's predicate rejects;
//  `random`: count uniform draws of valid genomes.
// Both ask in batches of batch_size; generation() counts batches and
// population() is the last told batch. done() is exact: ask() never returns
// an empty batch while done() is false.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ga/genome.hpp"
#include "core/ga/rng.hpp"
#include "core/ga/strategy.hpp"

namespace midtune {

struct GridConfig {
  // Gene name -> values (as in the genome JSON form: categorical genes by
  // value). Genes not listed take every value of their grid.
  std::map<std::string, std::vector<nlohmann::json>> values;
  int batch_size = 32;
  std::int64_t max_points = 1000000;  // refuse larger products
  bool operator==(const GridConfig&) const = default;
};
void to_json(nlohmann::json& out, const GridConfig& config);
void from_json(const nlohmann::json& in, GridConfig& config);

struct RandomConfig {
  int count = 32;
  int batch_size = 32;
  bool operator==(const RandomConfig&) const = default;
};
void to_json(nlohmann::json& out, const RandomConfig& config);
void from_json(const nlohmann::json& in, RandomConfig& config);

// Shared ask/tell bookkeeping of the two sweeps.
class SweepStrategy : public Strategy {
 public:
  std::vector<Candidate> ask() override;
  void tell(const std::vector<double>& fitness) override;
  bool done() const override;
  int generation() const override { return generation_; }
  std::vector<std::int64_t> population() const override { return last_batch_; }
  nlohmann::json save_state() const override;
  void load_state(const nlohmann::json& state) override;

 protected:
  SweepStrategy(GenomeSpace space, std::string kind, nlohmann::json config_json, int batch_size,
                std::uint64_t seed);
  // Next genome of the sweep, or false when exhausted.
  virtual bool next_genome(Genome& out) = 0;
  virtual bool exhausted() const = 0;
  // The subclass's cursor, saved and restored with the rest of the state.
  virtual nlohmann::json save_cursor() const = 0;
  virtual void load_cursor(const nlohmann::json& cursor) = 0;
  virtual Origin origin() const = 0;

  GenomeSpace space_;
  Rng rng_;

 private:
  std::string kind_;
  nlohmann::json config_json_;
  int batch_size_;
  int generation_ = 0;
  std::int64_t next_id_ = 0;
  std::vector<Candidate> pending_;
  bool has_pending_ = false;
  std::vector<std::int64_t> last_batch_;
};

class GridStrategy final : public SweepStrategy {
 public:
  // Throws std::invalid_argument naming the gene and value that is unknown,
  // off its grid or out of range, or when the product exceeds max_points.
  GridStrategy(GenomeSpace space, GridConfig config, std::uint64_t seed = 0);
  // Number of combinations before the predicate filter.
  std::int64_t total_points() const { return total_; }

 protected:
  bool next_genome(Genome& out) override;
  bool exhausted() const override { return cursor_ >= total_; }
  nlohmann::json save_cursor() const override { return cursor_; }
  void load_cursor(const nlohmann::json& cursor) override;
  Origin origin() const override { return Origin::grid; }

 private:
  Genome genome_at(std::int64_t position) const;
  // Moves the cursor past combinations the predicate rejects.
  void skip_invalid();

  std::vector<std::vector<double>> axes_;  // grid values per gene (genome form)
  std::int64_t total_ = 1;
  std::int64_t cursor_ = 0;
};

class RandomStrategy final : public SweepStrategy {
 public:
  RandomStrategy(GenomeSpace space, RandomConfig config, std::uint64_t seed);

 protected:
  bool next_genome(Genome& out) override;
  bool exhausted() const override { return drawn_ >= count_; }
  nlohmann::json save_cursor() const override { return drawn_; }
  void load_cursor(const nlohmann::json& cursor) override;
  Origin origin() const override { return Origin::random; }

 private:
  std::int64_t count_;
  std::int64_t drawn_ = 0;
};

}  // namespace midtune
