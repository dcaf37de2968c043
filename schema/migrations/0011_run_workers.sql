-- Schema version 11: how the evaluator ranks of an MPI run are doing.
-- runs.workers is the JSON the driver writes as the search goes (per rank:
-- host, device, units and prompts answered, time busy, fraction of time
-- idle), for `ga-run status`; NULL for a run in one process and for runs
-- stored before it.
ALTER TABLE runs ADD COLUMN workers TEXT;
