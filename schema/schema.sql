-- midtune results database, schema version 1 (the base every database starts
-- from). Later changes are forward migrations in migrations/NNNN_*.sql; the
-- version a file has reached is PRAGMA user_version. Times are UTC ISO-8601.
-- JSON columns hold nlohmann/json text; SQLite's json_* functions read them.

-- One row per experiment (a named search). config_text is the YAML as given;
-- search_config is the JSON of everything that decides the search, so a
-- resumed run can say exactly what an edit changed.
CREATE TABLE experiments (
  id            INTEGER PRIMARY KEY,
  name          TEXT NOT NULL UNIQUE,
  config_text   TEXT NOT NULL,
  config_hash   TEXT NOT NULL,
  search_config TEXT NOT NULL,
  source_path   TEXT,
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- One row per ga-run process working on an experiment; heartbeat_at moves
-- while it works, so a stale row is a run that died.
CREATE TABLE runs (
  id              INTEGER PRIMARY KEY,
  experiment_id   INTEGER NOT NULL REFERENCES experiments(id),
  host            TEXT NOT NULL,
  pid             INTEGER NOT NULL,
  started_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  heartbeat_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  finished_at     TEXT,
  evaluations     INTEGER NOT NULL DEFAULT 0,  -- backend evaluations this run made
  prompts         INTEGER NOT NULL DEFAULT 0,  -- prompts those evaluations ran
  backend_seconds REAL NOT NULL DEFAULT 0      -- wall time spent in the backend
);

-- The checkpoint after each generation's tell(): population membership
-- (candidate ids) and the strategy's whole state, RNG included.
CREATE TABLE generations (
  experiment_id  INTEGER NOT NULL REFERENCES experiments(id),
  generation     INTEGER NOT NULL,
  population     TEXT NOT NULL,
  strategy_state TEXT NOT NULL,
  best_fitness   REAL,
  mean_fitness   REAL,
  created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (experiment_id, generation)
);

-- The evaluation cache: one row per intervention x dataset slice x metric x
-- model. cache_key is the full canonical text (so a hash collision can never
-- reuse a wrong row); key_hash names it compactly.
CREATE TABLE evaluations (
  id              INTEGER PRIMARY KEY,
  cache_key       TEXT NOT NULL UNIQUE,
  key_hash        TEXT NOT NULL,
  intervention    TEXT NOT NULL,
  dataset_slice   TEXT NOT NULL,
  metric          TEXT NOT NULL,
  model           TEXT NOT NULL,
  position_scores TEXT,   -- JSON [{"position", "accuracy", "correct", "samples"}]
  fitness_inputs  TEXT,   -- JSON summary of the scores: mean, gap, std, U-shape index
  wall_seconds    REAL,
  status          TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
  error           TEXT,
  created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX evaluations_by_key_hash ON evaluations(key_hash);

-- Every candidate a strategy proposed. cache_hit = 1 when its evaluation was
-- taken from the cache instead of being run (an evaluation saved).
CREATE TABLE individuals (
  experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  candidate_id  INTEGER NOT NULL,
  generation    INTEGER NOT NULL,
  genome        TEXT NOT NULL,
  genome_hash   TEXT NOT NULL,
  origin        TEXT NOT NULL CHECK (origin IN ('init', 'crossover', 'mutation', 'elite', 'grid', 'random')),
  parents       TEXT NOT NULL,
  fitness       REAL NOT NULL,
  evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
  cache_hit     INTEGER NOT NULL CHECK (cache_hit IN (0, 1)),
  run_id        INTEGER REFERENCES runs(id),
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (experiment_id, candidate_id)
);

-- One row per sample of an evaluation.
CREATE TABLE sample_results (
  evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
  sample_id     TEXT NOT NULL,
  gold_position REAL NOT NULL,   -- fraction of the way through the chunks
  correct       INTEGER NOT NULL CHECK (correct IN (0, 1)),
  output        TEXT NOT NULL,
  gold_logprob  REAL,
  prompt_tokens INTEGER,
  PRIMARY KEY (evaluation_id, sample_id)
);
