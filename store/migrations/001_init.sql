-- Schema version 1: experiments, arms, runs, sessions, turns, labels.
-- Times are UTC RFC 3339 text so that `arbiter query` shows them readably.

CREATE TABLE experiments (
    id              INTEGER PRIMARY KEY,
    name            TEXT    NOT NULL,
    spec_path       TEXT    NOT NULL,
    spec            TEXT    NOT NULL,           -- the spec as written, credentials redacted
    status          TEXT    NOT NULL,           -- running | done | interrupted | failed
    seed            INTEGER NOT NULL,
    unit            TEXT    NOT NULL,
    alpha           REAL    NOT NULL,
    baseline        TEXT    NOT NULL,
    arbiter_version TEXT    NOT NULL,
    host            TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    finished_at     TEXT,
    error           TEXT
);

CREATE TABLE arms (
    id            INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    name          TEXT    NOT NULL,
    position      INTEGER NOT NULL,
    pins          TEXT    NOT NULL,             -- JSON {"env": {...}, "args": [...]}
    levels        TEXT,                         -- JSON {"factor": "level"}; NULL for explicit arms
    command       TEXT    NOT NULL,             -- JSON array
    env           TEXT    NOT NULL,             -- JSON object, credentials redacted
    UNIQUE (experiment_id, name)
);

CREATE TABLE runs (
    id            INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    arm_id        INTEGER NOT NULL REFERENCES arms(id),
    block         INTEGER NOT NULL,
    runtime       TEXT    NOT NULL,
    node          TEXT    NOT NULL DEFAULT '',
    gpus          TEXT    NOT NULL DEFAULT '',
    endpoint      TEXT    NOT NULL DEFAULT '',
    log_path      TEXT    NOT NULL DEFAULT '',
    status        TEXT    NOT NULL,             -- starting | ready | done | crashed | failed | interrupted
    started_at    TEXT    NOT NULL,
    ready_at      TEXT,
    ended_at      TEXT,
    exit_code     INTEGER,
    error         TEXT,
    log_tail      TEXT,
    server_info   TEXT                          -- JSON from the engine, when it serves one
);
CREATE INDEX runs_experiment ON runs (experiment_id);

CREATE TABLE sessions (
    experiment_id        INTEGER NOT NULL REFERENCES experiments(id),
    run_id               INTEGER NOT NULL REFERENCES runs(id),
    arm_id               INTEGER NOT NULL REFERENCES arms(id),
    session_index        INTEGER NOT NULL,
    block                INTEGER NOT NULL,
    status               TEXT    NOT NULL,      -- ok | error | timeout | aborted
    turns                INTEGER NOT NULL,
    corrupted            INTEGER NOT NULL,      -- 1 when any turn was labelled corrupted
    first_corrupted_turn INTEGER,
    error                TEXT,
    PRIMARY KEY (run_id, session_index)
);
CREATE INDEX sessions_experiment ON sessions (experiment_id, arm_id);

CREATE TABLE turns (
    experiment_id     INTEGER NOT NULL REFERENCES experiments(id),
    run_id            INTEGER NOT NULL REFERENCES runs(id),
    arm_id            INTEGER NOT NULL REFERENCES arms(id),
    session_index     INTEGER NOT NULL,
    turn_index        INTEGER NOT NULL,
    round             INTEGER NOT NULL,
    started_at        TEXT    NOT NULL,
    status_code       INTEGER NOT NULL,
    finish_reason     TEXT    NOT NULL,
    ttft_ms           REAL    NOT NULL,
    latency_ms        REAL    NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    content           TEXT    NOT NULL,         -- the assistant message's content
    tool_calls        TEXT,                     -- JSON array of structured tool calls
    corrupted         INTEGER NOT NULL,         -- 1 when any detector said so
    error             TEXT,
    request           TEXT    NOT NULL,         -- JSON body sent
    response          TEXT    NOT NULL,         -- assembled chat.completion JSON
    tools             TEXT,                     -- JSON array of the tools offered
    raw               TEXT    NOT NULL,         -- body as received (SSE events when streaming)
    PRIMARY KEY (run_id, session_index, turn_index)
);
CREATE INDEX turns_experiment ON turns (experiment_id, arm_id);

CREATE TABLE labels (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    run_id        INTEGER NOT NULL REFERENCES runs(id),
    session_index INTEGER NOT NULL,
    turn_index    INTEGER NOT NULL,
    detector      TEXT    NOT NULL,
    corrupted     INTEGER NOT NULL,
    reason        TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, session_index, turn_index, detector)
);
CREATE INDEX labels_experiment ON labels (experiment_id);
