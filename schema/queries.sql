-- Example queries for results.db. Run any of them with
--   ga-run query results.db "<one statement>"
-- or with the sqlite3 shell. Each query below is one statement ending in ';'
-- and is exercised by tests/schema (query_examples_test).

-- Best individual per generation (ties: lowest candidate id; children
-- racing dropped hold an estimate on part of the split and are left out).
SELECT e.name AS experiment, i.generation, i.candidate_id, i.fitness, i.genome
FROM individuals i
JOIN experiments e ON e.id = i.experiment_id
WHERE i.candidate_id = (
  SELECT j.candidate_id FROM individuals j
  WHERE j.experiment_id = i.experiment_id AND j.generation = i.generation AND j.raced_samples IS NULL
  ORDER BY j.fitness DESC, j.candidate_id LIMIT 1)
ORDER BY e.name, i.generation;

-- Per-position accuracy of each experiment's best individual.
WITH best AS (
  SELECT experiment_id, evaluation_id, fitness,
         ROW_NUMBER() OVER (PARTITION BY experiment_id ORDER BY fitness DESC, candidate_id) AS rank
  FROM individuals)
SELECT e.name AS experiment, s.gold_position, AVG(s.correct) AS accuracy, COUNT(*) AS samples
FROM best b
JOIN experiments e ON e.id = b.experiment_id
JOIN sample_results s ON s.evaluation_id = b.evaluation_id
WHERE b.rank = 1
GROUP BY e.name, s.gold_position
ORDER BY e.name, s.gold_position;

-- Evaluations saved by the cache, per experiment.
SELECT e.name AS experiment, COUNT(*) AS individuals,
       SUM(i.cache_hit) AS saved_by_cache,
       COUNT(DISTINCT i.evaluation_id) AS distinct_evaluations
FROM individuals i JOIN experiments e ON e.id = i.experiment_id
GROUP BY e.name ORDER BY e.name;

-- Mean and best fitness per generation (whole-split fitness only).
SELECT e.name AS experiment, i.generation, MAX(i.fitness) AS best, AVG(i.fitness) AS mean
FROM individuals i JOIN experiments e ON e.id = i.experiment_id
WHERE i.raced_samples IS NULL
GROUP BY e.name, i.generation ORDER BY e.name, i.generation;

-- Children racing dropped per generation, and the samples they saw.
SELECT e.name AS experiment, i.generation, COUNT(*) AS raced, SUM(i.raced_samples) AS samples_seen
FROM individuals i JOIN experiments e ON e.id = i.experiment_id
WHERE i.raced_samples IS NOT NULL
GROUP BY e.name, i.generation ORDER BY e.name, i.generation;

-- PHS channel candidates of each model's latest `ga-run phs-search`, best first.
SELECT p.model_name, p.rank, p.channel, p.monotone_layers, p.smoothness,
       p.validation_loss, p.validation_loss - p.baseline_loss AS vs_plain, p.created_at
FROM phs_channels p
WHERE p.created_at = (SELECT MAX(q.created_at) FROM phs_channels q WHERE q.model_key = p.model_key)
ORDER BY p.model_name, p.rank;
