-- Schema version 10: what computed each run's rows. runs.provenance is the
-- JSON of the program (git describe at build, build options), the host and
-- CPU model, and how the backend computed (device, kernel path, threads,
-- precision); NULL for runs stored before it. generations.run_id names the
-- run that stored a checkpoint, so a report can mark which kernel path
-- computed which generations (NULL before this version).
ALTER TABLE runs ADD COLUMN provenance TEXT;
ALTER TABLE generations ADD COLUMN run_id INTEGER REFERENCES runs(id);
