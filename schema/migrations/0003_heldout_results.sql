-- Schema version 3: the held-out evaluation a finished search ends with
--. One row per experiment and role: 'best' (the search's
-- best individual), 'baseline' (no intervention) and 'pi-mean' (PI at the
-- mean of the best curve's RoPE scales), each pointing at an ordinary
-- evaluations row on the held-out split (so the cache and the per-sample
-- results are shared with everything else).
CREATE TABLE heldout_results (
  experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  role          TEXT NOT NULL CHECK (role IN ('best', 'baseline', 'pi-mean')),
  split         TEXT NOT NULL,
  evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (experiment_id, role)
);
