-- Schema version 2: the experiment's design as the verdict needs it (blocks and looks
-- planned, non-inferiority margin, factors with their level order, the workload's shape),
-- as JSON, so that a verdict can be rebuilt from the database alone.
ALTER TABLE experiments ADD COLUMN design TEXT NOT NULL DEFAULT '{}';

-- Why scheduling stopped early, when it did (a sequential boundary was crossed).
ALTER TABLE experiments ADD COLUMN stopped_early TEXT;
