-- The held-out step of a Pareto search (nsga2) also evaluates every member
-- of the final front besides the best, as role 'front-<candidate id>'.
-- SQLite cannot widen a CHECK in place, so the table is rebuilt with its
-- rows (as in 0004). Numbered 0007: the experiment-lease migration of the
-- storage work is 0006.
CREATE TABLE heldout_results_v7 (
  experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  role          TEXT NOT NULL CHECK (role IN ('best', 'baseline', 'pi-mean', 'paper-default')
                                     OR role GLOB 'front-[0-9]*'),
  split         TEXT NOT NULL,
  evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (experiment_id, role)
);
INSERT INTO heldout_results_v7 (experiment_id, role, split, evaluation_id, created_at)
  SELECT experiment_id, role, split, evaluation_id, created_at FROM heldout_results;
DROP TABLE heldout_results;
ALTER TABLE heldout_results_v7 RENAME TO heldout_results;
