-- Schema version 10: where and when each run ran, now that the arms of a block run side
-- by side on slots across nodes. node and gpus (already on runs) name the slot's node and
-- devices; slot numbers the slot within its node; wave is the block's wave the run
-- belonged to (0 when every arm of the block had a slot; 1, 2, ... when slots were fewer
-- than arms); instance is what the runtime started ("container 3f2a9c1b0d4e", "pid 4242").
-- workload_started_at and workload_ended_at bound the workload itself: every arm of a
-- wave starts it at once, after all of them are ready (the start barrier), so the
-- windows of one wave's arms overlap.
ALTER TABLE runs ADD COLUMN slot INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN wave INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN instance TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN workload_started_at TEXT;
ALTER TABLE runs ADD COLUMN workload_ended_at TEXT;
