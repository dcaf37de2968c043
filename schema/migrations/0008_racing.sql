-- Schema version 8: racing (search.racing). A raced child is scored on
-- growing slices of the search split and may be dropped before the whole
-- split: its evaluation row then holds the samples of the slices it saw and
-- complete = 0. The cache serves complete rows only; a later evaluation of
-- the same intervention runs the missing samples and completes the row.
-- individuals.raced_samples is the number of samples a dropped child's
-- fitness was computed on (NULL: not dropped, the fitness is the whole
-- split's); such a fitness is an estimate on fewer items, never a parent's,
-- and is left out of bests and generation statistics.
ALTER TABLE evaluations ADD COLUMN complete INTEGER NOT NULL DEFAULT 1 CHECK (complete IN (0, 1));
ALTER TABLE individuals ADD COLUMN raced_samples INTEGER CHECK (raced_samples IS NULL OR raced_samples > 0);
