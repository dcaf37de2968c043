// The results database (schema/schema.sql): open + migrate, and the typed
// reads and writes the search, the cache, the held-out step and the reports
// need. Every SQL statement of midtune lives here (or in schema/); writes
// that must land together are one Store method that runs one transaction,
// so no caller ever holds a transaction or a raw connection.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema/process_identity.hpp"
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

// PRAGMA application_id of a midtune results database ("MTUN"), set when the
// file is created, so a file says whose it is.
inline constexpr std::int64_t kMidtuneApplicationId = 0x4D54554E;

// A file that is not a midtune results database (another program's SQLite
// file, or not SQLite at all); it was left exactly as it was.
struct NotMidtuneDatabase : sql::SqlError {
  using sql::SqlError::SqlError;
};
// A midtune database that fails PRAGMA quick_check / integrity_check; it
// was not written.
struct DamagedDatabase : sql::SqlError {
  using sql::SqlError::SqlError;
};

// Another live process holds the experiment's lease.
struct LeaseHeld : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// This process's lease was taken over (--takeover elsewhere) while it ran.
struct LeaseLost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How a run holds its experiment's lease (schema/migrations/0006_*.sql).
struct LeasePolicy {
  // Declared in the lease: a heartbeat older than this means the owner died.
  // Heartbeats come with every evaluation's commit, so this must exceed the
  // longest single evaluation (minutes for a large model behind a server).
  // A dead owner on the same host is recognised at once (holder_gone).
  double stale_after_seconds = 900.0;
  bool takeover = false;  // take the lease even from a live owner
};

// True when `host` is this machine and process `pid` provably ended there
// (holder_gone with the pid alone: a process on another host, or one that
// exists, is not known to be gone).
bool process_gone_on_this_host(const std::string& host, std::int64_t pid);

struct LeaseRecord {
  std::string experiment;
  std::string host;
  std::int64_t pid = 0;
  std::string started_at;
  std::string heartbeat_at;
  double heartbeat_age_seconds = 0.0;
  double stale_after_seconds = 0.0;
  // The holder's start time, boot and PID namespace (schema 9; unknown in
  // older leases).
  std::optional<std::int64_t> pid_start_ticks;
  std::optional<std::string> boot_id;
  std::optional<std::string> pid_namespace;
  ProcessIdentity holder() const { return {host, pid, pid_start_ticks, boot_id, pid_namespace}; }
  // The heartbeat is fresh and the holder is not known to be dead
  // (holder_gone).
  bool alive() const;
};

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
  // False while the row holds only the first slices of a race (schema 8):
  // never served by the cache; a later evaluation completes it.
  bool complete = true;
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
  // Racing dropped it after this many samples: `fitness` is the estimate on
  // them, not the whole split's (never a parent's; left out of bests).
  std::optional<int> raced_samples;
};

struct GenerationRecord {
  std::int64_t experiment_id = -1;
  int generation = 0;
  nlohmann::json population = nlohmann::json::array();
  nlohmann::json strategy_state;
  std::optional<double> best_fitness;
  std::optional<double> mean_fitness;
};

// An evaluation the backend just produced, not yet stored.
struct NewEvaluation {
  EvaluationRecord record;
  std::vector<SampleRecord> samples;
};

// The evaluation an individual points at: found in the cache or just stored.
struct StoredEvaluation {
  std::int64_t id = -1;
  std::vector<PositionScore> position_scores;
  bool cache_hit = false;
};

// What an evaluation's stored samples add up to (racing): the per-position
// tallies and their summary, and whether every item of the split is there.
struct SampleSummary {
  std::vector<PositionScore> position_scores;
  nlohmann::json fitness_inputs;
  bool complete = false;
};

// An evaluation after add_samples(): every sample stored under its key.
struct ExtendedEvaluation {
  std::int64_t id = -1;
  std::vector<SampleRecord> samples;  // in sample_id order
  bool complete = false;
  // The row was already complete (another process finished it): nothing was added.
  bool was_complete = false;
};

// The row stored under a cache key, as racing checks it between steps: its
// id, whether it holds the whole split, and how many samples it holds
// (samples are only ever added to an ok row, so an unchanged count means
// samples read before are still all of them).
struct EvaluationState {
  std::int64_t id = -1;
  bool complete = false;
  std::int64_t samples = 0;
};

// Samples a caller holds of row `id` (read from it, or add_samples()'s
// result), in sample_id order.
struct KnownSamples {
  std::int64_t id = -1;
  const std::vector<SampleRecord>* samples = nullptr;
};

// Best and mean fitness over a set of candidates.
struct FitnessStats {
  double best = 0.0;
  double mean = 0.0;
};

// An experiment's best individual (highest fitness, lowest candidate id on
// ties) with the stored JSON of its evaluation.
struct BestIndividual {
  IndividualRecord individual;
  nlohmann::json intervention;
  nlohmann::json position_scores;
  nlohmann::json fitness_inputs;
};

// One row of heldout_results joined with its evaluation and its samples
// (in sample_id order, so two roles on the same split pair up item by item).
struct HeldoutRow {
  std::string role;
  std::string split;
  nlohmann::json intervention;
  nlohmann::json position_scores;
  nlohmann::json fitness_inputs;
  std::string metric;
  std::vector<SampleRecord> samples;
};

// Database-wide counts for `ga-run status`.
struct StoreTotals {
  std::int64_t evaluations_ok = 0;
  std::int64_t evaluations_failed = 0;
  std::int64_t evaluations_partial = 0;  // races' rows holding part of a split
  std::int64_t sample_results = 0;
};

// One experiment's line of `ga-run status`.
struct ExperimentStatus {
  std::string name;
  std::int64_t generations = 0;
  std::int64_t individuals = 0;
  std::int64_t evaluated = 0;    // individuals whose evaluation ran (cache_hit = 0)
  std::int64_t from_cache = 0;
  std::int64_t raced = 0;        // individuals racing dropped before the whole split
  // Samples (prompts) of the search split: what one unraced, uncached
  // individual costs; 0 while no individual has the whole split (racing may
  // drop candidates of the first population before any is scored in full).
  std::int64_t split_samples = 0;
  // Prompts racing did not run: the split's samples minus those each
  // dropped individual saw (0 while split_samples is unknown).
  std::int64_t saved_by_racing = 0;
  std::optional<double> best_fitness;  // over individuals with the whole split's fitness
  double prompts = 0.0;          // over every run
  double backend_seconds = 0.0;  // over every run
  std::int64_t runs = 0;
  // "complete|running|stopped (host pid N, heartbeat T)" of the latest run;
  // "running" means the heartbeat moved in the last 60 s.
  std::optional<std::string> last_run;
  // "host pid" of the latest unfinished run.
  std::optional<std::string> unfinished_run;
  // The lease of the process running it now, if one holds it.
  std::optional<LeaseRecord> lease;
};

// One generation's line of `ga-run report`: the checkpoint's best/mean over
// its population, and how many of its new candidates were evaluated or came
// from the cache.
struct GenerationSummary {
  std::int64_t generation = 0;
  double best = 0.0;  // 0 when the checkpoint stored none
  double mean = 0.0;
  std::int64_t population = 0;
  std::int64_t evaluated = 0;
  std::int64_t from_cache = 0;
  // Dropped by racing before the whole split (a child that took a partial
  // row from the cache counts in from_cache too).
  std::int64_t raced = 0;
  std::optional<std::int64_t> run_id;  // the run that stored it (none before schema v10)
};

// One ga-run process's work on an experiment and what computed it.
struct RunProvenance {
  std::int64_t run_id = -1;
  std::string started_at;
  nlohmann::json provenance;  // null for runs stored before schema v10
  // An MPI run's evaluator ranks as the driver last recorded them
  // (Store::record_workers); null for a run in one process.
  nlohmann::json workers;
};

// A candidate channel of `ga-run phs-search` (table phs_channels).
struct PhsChannelRecord {
  std::string model_key;
  std::string model_name;
  nlohmann::json settings;
  int channel = 0;
  int monotone_layers = 0;
  std::vector<int> monotone_layer_list;
  int direction = 0;
  double smoothness = 0.0;
  double validation_loss = 0.0;
  double baseline_loss = 0.0;
  int rank = 0;
  std::string created_at;
};

class Store {
 public:
  enum class Access { read_write, read_write_existing, read_only };
  // What opening checks besides whose file it is: PRAGMA quick_check (cheap:
  // every page's structure, no index contents) or the full integrity_check.
  enum class Check { quick, full };
  // Before anything is written, an existing file is read on its own
  // read-only connection: one that is not midtune's (NotMidtuneDatabase),
  // from a newer midtune, or damaged (DamagedDatabase) is refused and left
  // byte-identical. read_write: opens or creates the file, then switches it
  // to WAL and creates / migrates the schema in one locked transaction (two
  // processes opening one new file both see it created once).
  // read_write_existing: the same, but a missing file is an error (commands
  // that only read or add to a database never create one at a mistyped
  // path). read_only: the file must exist and is neither migrated nor
  // written (status, report).
  explicit Store(const std::string& path, Access access = Access::read_write, Check check = Check::quick);
  ~Store();

  const std::string& path() const { return db_.path(); }
  int schema_version() { return db_.user_version(); }

  std::optional<ExperimentRecord> find_experiment(const std::string& name);
  // The most recently created experiment.
  std::optional<ExperimentRecord> latest_experiment();
  std::vector<ExperimentRecord> experiments();
  ExperimentRecord create_experiment(const ExperimentRecord& record);

  // Takes the lease of experiment `name` for this process, in one locked
  // transaction: throws LeaseHeld (naming pid, host and start) while a live
  // process holds it, unless policy.takeover. Returns the dead or overridden
  // lease it replaced, if any. From now on every heartbeat() moves the
  // lease's heartbeat too, and throws LeaseLost once another process took it.
  std::optional<LeaseRecord> acquire_lease(const std::string& name, const LeasePolicy& policy);
  // Drops this process's lease (also done by the destructor).
  void release_lease();
  std::optional<LeaseRecord> lease(const std::string& name);

  // `provenance`: what computes this run's rows (core/cli/build_info.hpp).
  std::int64_t start_run(std::int64_t experiment_id, const nlohmann::json& provenance = nullptr);
  // Every run of the experiment, oldest first.
  std::vector<RunProvenance> run_provenances(std::int64_t experiment_id);
  // Moves the heartbeat (the run's, and the lease's when one is held) and
  // adds to the run's counters.
  void heartbeat(std::int64_t run_id, int evaluations = 0, int prompts = 0, double backend_seconds = 0.0);
  void finish_run(std::int64_t run_id);
  // How the run's evaluator ranks are doing (Backend::workers()), replacing
  // what was recorded before.
  void record_workers(std::int64_t run_id, const nlohmann::json& workers);

  // The cache: only successful, complete evaluations are returned.
  std::optional<EvaluationRecord> find_evaluation(const std::string& cache_key);
  // A race's partial row under the key (complete = 0), if any.
  std::optional<EvaluationRecord> find_partial_evaluation(const std::string& cache_key);
  std::optional<EvaluationRecord> evaluation(std::int64_t id);
  // The successful row under the key, complete or partial, if any.
  std::optional<EvaluationState> evaluation_state(const std::string& cache_key);
  // The per-sample results of an evaluation, in sample_id order.
  std::vector<SampleRecord> evaluation_samples(std::int64_t evaluation_id);
  // Inserts (or replaces a failed row with the same key) with its samples,
  // in one transaction; returns the id.
  std::int64_t insert_evaluation(const EvaluationRecord& record, const std::vector<SampleRecord>& samples);
  // The successful evaluation stored under record.cache_key if another
  // process stored one meanwhile (cache_hit), else `record` inserted with its
  // samples; one transaction, so two processes never both insert one key.
  StoredEvaluation cache_evaluation(const EvaluationRecord& record, const std::vector<SampleRecord>& samples);

  // One candidate's result, in one transaction: the evaluation stored under
  // `cache_key` if one is there by now (another process may have stored it
  // while the backend ran; the run's heartbeat only moves), else
  // `evaluate()`'s evaluation inserted and counted in the run's heartbeat;
  // then the individual `individual(evaluation)` builds. Returns it.
  IndividualRecord record_individual(std::int64_t run_id, const std::string& cache_key,
                                     const std::function<NewEvaluation()>& evaluate,
                                     const std::function<IndividualRecord(const StoredEvaluation&)>& individual);

  // Racing and completing partial rows, in one transaction: when the row
  // under record.cache_key is complete, adds nothing (was_complete);
  // otherwise inserts `fresh` into the partial row (a new one when there is
  // none; samples another process stored meanwhile are kept), rewrites the
  // row's scores from summarise(all its samples), adds record.wall_seconds
  // and marks it complete when the summary says so. With a run_id the run's
  // heartbeat counts one evaluation and fresh.size() prompts (when fresh is
  // not empty); without, only the lease's heartbeat moves. Then the
  // individual that `individual(the extended evaluation)` returns, if any,
  // is inserted in the same transaction (so a kill never leaves a finished
  // race without its individual). `known`: the row's samples as the caller
  // holds them; while the row still holds exactly those, the result is them
  // merged with `fresh` instead of the row read back (the same samples
  // either way, without reading them).
  using IndividualOf = std::function<std::optional<IndividualRecord>(const ExtendedEvaluation&)>;
  ExtendedEvaluation add_samples(std::optional<std::int64_t> run_id, const EvaluationRecord& record,
                                 const std::vector<SampleRecord>& fresh,
                                 const std::function<SampleSummary(const std::vector<SampleRecord>&)>& summarise,
                                 const IndividualOf& individual = {}, KnownSamples known = {});

  void insert_individual(const IndividualRecord& record);
  std::optional<IndividualRecord> find_individual(std::int64_t experiment_id, std::int64_t candidate_id);
  std::vector<IndividualRecord> individuals(std::int64_t experiment_id);
  std::optional<BestIndividual> best_individual(std::int64_t experiment_id);
  // A model other than `model_key` that evaluated an individual of the
  // experiment, if any.
  std::optional<std::string> other_model(std::int64_t experiment_id, const std::string& model_key);
  // Best and mean fitness of the stored individuals among `candidate_ids`
  // (a JSON array); nullopt when none of them is stored.
  std::optional<FitnessStats> fitness_of_candidates(std::int64_t experiment_id, const nlohmann::json& candidate_ids);

  // `run_id`: the run that computed it (generations.run_id; none in tests).
  void save_generation(const GenerationRecord& record, std::optional<std::int64_t> run_id = std::nullopt);
  // The generation checkpoint and the run's heartbeat, in one transaction.
  void save_checkpoint(const GenerationRecord& record, std::int64_t run_id);
  std::optional<GenerationRecord> latest_generation(std::int64_t experiment_id);
  std::vector<GenerationRecord> generations(std::int64_t experiment_id);
  std::vector<GenerationSummary> generation_summaries(std::int64_t experiment_id);

  // Replaces the experiment's row for `role` on `split`.
  void record_heldout(std::int64_t experiment_id, const std::string& role, const std::string& split,
                      std::int64_t evaluation_id);
  // Baseline, pi-mean, paper-default, then the rest (best); empty when the
  // file predates schema version 3.
  std::vector<HeldoutRow> heldout_rows(std::int64_t experiment_id);

  StoreTotals totals();
  std::vector<ExperimentStatus> experiment_statuses();

  // Stores the candidates with one created_at (SQLite's clock), in one
  // transaction; record.created_at is ignored.
  void insert_phs_channels(const std::vector<PhsChannelRecord>& records);
  // Every stored candidate, ordered by created_at then rank.
  std::vector<PhsChannelRecord> phs_channels();

 private:
  void migrate();
  bool has_table(const std::string& name);
  bool has_column(const std::string& table, const std::string& column);
  // Read-only files may predate schema 8 (no racing columns): the column
  // lists and filters below read them as "complete" and "not raced".
  std::string evaluation_columns() const;
  std::string individual_columns() const;
  std::string complete_only() const;
  std::string exact_only(const std::string& alias) const;
  // Moves the held lease's heartbeat (nothing without one); throws LeaseLost
  // when another process took it.
  void beat_lease();
  std::int64_t insert_evaluation_rows(const EvaluationRecord& record, const std::vector<SampleRecord>& samples);
  sql::Database db_;
  std::optional<std::string> leased_experiment_;
  // Who holds leased_experiment_ (this process, as written into the lease).
  ProcessIdentity lease_holder_;
  bool racing_columns_ = true;
  // Read-only files may predate schema 9 (leases without the holder's
  // identity).
  bool lease_identity_columns_ = true;
  // Read-only files may predate schema 10 (runs without their provenance).
  bool provenance_columns_ = true;
  // Read-only files may predate schema 11 (runs without their workers).
  bool workers_column_ = true;
};

// `ga-run query`: one read-only statement on its own read-only connection.
struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;  // nullopt: NULL
  bool cut = false;  // more rows than QueryLimits::max_rows
};
// The statement would modify the database.
struct QueryRefused : sql::SqlError {
  using sql::SqlError::SqlError;
};
// The statement ran past QueryLimits::timeout_seconds and was stopped.
struct QueryTimedOut : sql::SqlError {
  using sql::SqlError::SqlError;
};
// The statement outgrew QueryLimits::max_value_bytes or max_memory_bytes.
struct QueryTooLarge : sql::SqlError {
  using sql::SqlError::SqlError;
};
// What a query may take: wall time for the whole statement and rows
// delivered (0 means no limit); the longest string or blob any value may
// reach, and the memory SQLite may hold while the statement runs (a value
// or a recursive CTE that outgrows them stops the statement with a message).
struct QueryLimits {
  double timeout_seconds = 60.0;
  std::int64_t max_rows = 10000;
  int max_value_bytes = 16 << 20;
  std::int64_t max_memory_bytes = std::int64_t{512} << 20;
};
using QueryCell = std::optional<std::string>;  // nullopt: NULL
// Calls on_columns with the column names, then on_row with each row as
// SQLite produces it (nothing is held, so memory stays bounded however many
// rows the statement makes), up to limits.max_rows rows. Returns the number
// of rows delivered and whether more were left (cut). Throws QueryRefused
// for a statement that could write, QueryTimedOut past the timeout, and
// sql::SqlError for a file that cannot be read or SQL that does not compile.
struct QueryOutcome {
  std::int64_t rows = 0;
  bool cut = false;
};
QueryOutcome run_read_only_query(const std::string& path, const std::string& sql_text, const QueryLimits& limits,
                                 const std::function<void(const std::vector<std::string>&)>& on_columns,
                                 const std::function<void(const std::vector<QueryCell>&)>& on_row);
// The same, the rows collected (at most limits.max_rows of them).
QueryResult run_read_only_query(const std::string& path, const std::string& sql_text, const QueryLimits& limits = {});

}  // namespace midtune
