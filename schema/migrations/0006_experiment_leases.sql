-- Schema version 6: who runs an experiment now. A ga-run process holds its
-- experiment's lease (one row, keyed by name: the lease is taken before the
-- experiments row may exist) from start to end and moves heartbeat_at at
-- every commit of an evaluation or a checkpoint; a second process on the same
-- experiment is refused while the lease is alive. A lease is dead when its
-- heartbeat is older than stale_after_seconds (the owner's own declaration:
-- longer than any one evaluation it may run), or when it names a process on
-- this host that no longer exists; a dead lease is taken over.
CREATE TABLE experiment_leases (
  experiment          TEXT PRIMARY KEY,
  host                TEXT NOT NULL,
  pid                 INTEGER NOT NULL,
  started_at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  heartbeat_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  stale_after_seconds REAL NOT NULL CHECK (stale_after_seconds > 0)
);
