-- Schema version 8: what a workload measured per phase, beyond its turns. A phase is a
-- closed loop at a concurrency, open-loop arrivals at a rate, or an abort cascade with the
-- liveness recovery after it; sessions first_session .. first_session+sessions-1 of its
-- run belong to it. Phases of one name are the same in every arm.
CREATE TABLE phases (
    experiment_id     INTEGER NOT NULL REFERENCES experiments(id),
    run_id            INTEGER NOT NULL REFERENCES runs(id),
    arm_id            INTEGER NOT NULL REFERENCES arms(id),
    name              TEXT    NOT NULL,           -- "c=32 before", "poisson 4/s", "cascade 1"
    kind              TEXT    NOT NULL,           -- closed | open | cascade
    position          INTEGER NOT NULL,           -- order within the run
    concurrency       INTEGER NOT NULL DEFAULT 0,
    rate              REAL    NOT NULL DEFAULT 0, -- open loop: requests per second
    first_session     INTEGER NOT NULL,
    sessions          INTEGER NOT NULL,
    started_at        TEXT,
    ended_at          TEXT,
    requests          INTEGER NOT NULL DEFAULT 0,
    completed         INTEGER NOT NULL DEFAULT 0,
    tokens            INTEGER NOT NULL DEFAULT 0, -- completion tokens of completed requests
    tokens_per_second REAL,                       -- the engine's: tokens / (ended - started)
    abort             TEXT,                       -- cascades: abort_all | abort_request | disconnect
    aborted           INTEGER NOT NULL DEFAULT 0, -- requests the abort cut
    finished          INTEGER NOT NULL DEFAULT 0, -- requests that ended before it
    aborted_at        TEXT,
    recovered         INTEGER,                    -- cascades: 1 when a canary completed after the abort
    recovery_ms       REAL,                       -- abort to the end of that canary; NULL when none did
    canaries          INTEGER NOT NULL DEFAULT 0,
    note              TEXT,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX phases_experiment ON phases (experiment_id, arm_id);

-- A turn's decode time, from its first content or tool-call delta to its last, and how
-- many stream events carried one: the inter-token latency is decode_ms over the tokens
-- after the first, measured only where the tokens arrived in two events or more (a tool
-- call a parser holds back until it closes arrives in one). NULL: not measured.
ALTER TABLE turns ADD COLUMN decode_ms REAL;
ALTER TABLE turns ADD COLUMN deltas INTEGER NOT NULL DEFAULT 0;
