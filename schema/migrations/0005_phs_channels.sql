-- Schema version 5: the candidates of `ga-run phs-search` (the PHS
-- channel search, docs/methods.md "PHS"). One row per candidate channel of one
-- search; a search is identified by (model_key, settings, created_at).
-- monotone_layers counts the analysed layers whose cubic fit is monotone
-- (monotone_layer_list lists them, JSON); smoothness is the sum of squared
-- second differences (lower is smoother); validation_loss is the mean
-- -log p(gold answer) per KV validation prompt with the channel scaled as
-- settings says, baseline_loss the same without intervention; rank 1 = the
-- lowest validation loss (the channel PHS would pick).
CREATE TABLE phs_channels (
  id                  INTEGER PRIMARY KEY,
  model_key           TEXT NOT NULL,
  model_name          TEXT NOT NULL,
  settings            TEXT NOT NULL,
  channel             INTEGER NOT NULL CHECK (channel >= 0),
  monotone_layers     INTEGER NOT NULL CHECK (monotone_layers >= 0),
  monotone_layer_list TEXT NOT NULL,
  direction           INTEGER NOT NULL CHECK (direction IN (-1, 1)),
  smoothness          REAL NOT NULL,
  validation_loss     REAL NOT NULL,
  baseline_loss       REAL NOT NULL,
  rank                INTEGER NOT NULL CHECK (rank >= 1),
  created_at          TEXT NOT NULL,
  UNIQUE (model_key, settings, created_at, channel)
);
CREATE INDEX phs_channels_by_model ON phs_channels(model_name, created_at, rank);
