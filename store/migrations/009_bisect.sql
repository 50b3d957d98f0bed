-- Schema version 9: bisections. A bisection searches which of the changes between a good
-- and a bad configuration makes an engine corrupt; every step is an experiment of its
-- own (good against good with some changes applied), linked here by step number. Like an
-- experiment, a bisection is run by one arbiter at a time: the owner columns are its
-- lease (see leases), renewed while it runs and cleared when it ends.
CREATE TABLE bisections (
    id              INTEGER PRIMARY KEY,
    name            TEXT    NOT NULL,
    spec_path       TEXT    NOT NULL,
    spec            TEXT    NOT NULL,           -- the bisection spec as written, credentials redacted
    status          TEXT    NOT NULL,           -- running | done | interrupted | failed
    changes         TEXT    NOT NULL,           -- JSON array: each change's kind, name and label, in search order
    error_budget    REAL    NOT NULL,
    effect          REAL    NOT NULL,
    looks           INTEGER NOT NULL,           -- blocks a step may take
    max_steps       INTEGER NOT NULL,
    step_alpha      REAL    NOT NULL,           -- error_budget / max_steps
    sessions        INTEGER NOT NULL,           -- sessions per arm and look
    conclusion      TEXT,                       -- JSON: what the search found, once it ended
    arbiter_version TEXT    NOT NULL,
    host            TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    finished_at     TEXT,
    error           TEXT,
    owner           TEXT,                       -- the running arbiter's lease; NULL when none holds it
    owner_host      TEXT,
    owner_pid       INTEGER,
    owner_pid_namespace TEXT,
    heartbeat_at    TEXT
);

CREATE TABLE bisection_steps (
    bisection_id    INTEGER NOT NULL REFERENCES bisections(id),
    step            INTEGER NOT NULL,           -- from 1
    role            TEXT    NOT NULL,           -- reproduce | search | confirm | revert
    applied         TEXT    NOT NULL,           -- JSON array of the changes applied (0-based indexes into changes)
    experiment_name TEXT    NOT NULL,           -- the step's experiment is found by this name until it is linked
    experiment_id   INTEGER REFERENCES experiments(id),
    outcome         TEXT,                       -- corrupts | clean | inconclusive | lower; NULL until judged
    PRIMARY KEY (bisection_id, step)
);
