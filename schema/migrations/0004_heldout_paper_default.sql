-- Schema version 4: the held-out step also evaluates a method's paper
-- default (Ms-PoE, SIW, CALIOPE, PHS and combos are compared with
-- the baseline AND the method as its paper sets it). SQLite cannot widen a
-- CHECK in place, so the table is rebuilt with its rows.
CREATE TABLE heldout_results_v4 (
  experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  role          TEXT NOT NULL CHECK (role IN ('best', 'baseline', 'pi-mean', 'paper-default')),
  split         TEXT NOT NULL,
  evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (experiment_id, role)
);
INSERT INTO heldout_results_v4 (experiment_id, role, split, evaluation_id, created_at)
  SELECT experiment_id, role, split, evaluation_id, created_at FROM heldout_results;
DROP TABLE heldout_results;
ALTER TABLE heldout_results_v4 RENAME TO heldout_results;
