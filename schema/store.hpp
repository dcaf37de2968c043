// The results database (schema/schema.sql): open + migrate, and the typed
// reads and writes the run loop, the cache and the reports need. Writes that
// must land together are grouped by the caller inside an sql::Transaction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema/sqlite.hpp"

namespace midtune {

// Forward migrations, in order; migration i brings the file to version i + 1.
struct Migration {
  int version;
  const char* name;
  const char* sql;
};
const std::vector<Migration>& schema_migrations();
int latest_schema_version();

struct ExperimentRecord {
  std::int64_t id = -1;
  std::string name;
  std::string config_text;
  std::string config_hash;
  nlohmann::json search_config;
  std::string source_path;
  std::string created_at;
};

struct PositionScore {
  double position = 0.0;  // gold position, fraction of the way through
  double accuracy = 0.0;
  int correct = 0;
  int samples = 0;
  bool operator==(const PositionScore&) const = default;
};
nlohmann::json to_json(const std::vector<PositionScore>& scores);
std::vector<PositionScore> position_scores_from_json(const nlohmann::json& j);

struct SampleRecord {
  std::string sample_id;
  double gold_position = 0.0;
  bool correct = false;
  std::string output;
  std::optional<double> gold_logprob;
  int prompt_tokens = 0;
};

struct EvaluationRecord {
  std::int64_t id = -1;
  std::string cache_key;
  std::string key_hash;
  std::string intervention;   // JSON text
  std::string dataset_slice;  // JSON text
  std::string metric;
  std::string model;          // ModelIdentity::key()
  std::vector<PositionScore> position_scores;
  nlohmann::json fitness_inputs;
  double wall_seconds = 0.0;
  std::string status = "ok";  // ok | failed
  std::string error;
};

struct IndividualRecord {
  std::int64_t experiment_id = -1;
  std::int64_t candidate_id = -1;
  int generation = 0;
  nlohmann::json genome;
  std::string genome_hash;
  std::string origin;
  nlohmann::json parents = nlohmann::json::array();
  double fitness = 0.0;
  std::int64_t evaluation_id = -1;
  bool cache_hit = false;
  std::optional<std::int64_t> run_id;
};

struct GenerationRecord {
  std::int64_t experiment_id = -1;
  int generation = 0;
  nlohmann::json population = nlohmann::json::array();
  nlohmann::json strategy_state;
  std::optional<double> best_fitness;
  std::optional<double> mean_fitness;
};

class Store {
 public:
  // Opens or creates the file and applies every pending migration. A file
  // from a newer midtune (user_version above latest) is refused.
  explicit Store(const std::string& path);

  sql::Database& db() { return db_; }
  const std::string& path() const { return db_.path(); }

  std::optional<ExperimentRecord> find_experiment(const std::string& name);
  std::vector<ExperimentRecord> experiments();
  ExperimentRecord create_experiment(const ExperimentRecord& record);

  std::int64_t start_run(std::int64_t experiment_id);
  // Moves the heartbeat and adds to the run's counters.
  void heartbeat(std::int64_t run_id, int evaluations = 0, int prompts = 0, double backend_seconds = 0.0);
  void finish_run(std::int64_t run_id);

  // The cache: only successful evaluations are returned.
  std::optional<EvaluationRecord> find_evaluation(const std::string& cache_key);
  std::optional<EvaluationRecord> evaluation(std::int64_t id);
  // Inserts (or replaces a failed row with the same key); returns the id.
  std::int64_t insert_evaluation(const EvaluationRecord& record, const std::vector<SampleRecord>& samples);

  void insert_individual(const IndividualRecord& record);
  std::optional<IndividualRecord> find_individual(std::int64_t experiment_id, std::int64_t candidate_id);
  std::vector<IndividualRecord> individuals(std::int64_t experiment_id);

  void save_generation(const GenerationRecord& record);
  std::optional<GenerationRecord> latest_generation(std::int64_t experiment_id);
  std::vector<GenerationRecord> generations(std::int64_t experiment_id);

 private:
  void migrate();
  sql::Database db_;
};

}  // namespace midtune
