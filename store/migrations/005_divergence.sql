-- Schema version 5: divergence from the baseline arm at temperature 0. One row per session
-- of a non-baseline arm that was compared with the baseline's session of the same index:
-- where it first departs (turn, field, rune, excerpts of both sides), or NULLs when every
-- turn both completed matched. Informational; a spec that lists the divergence detector
-- also gets labels (detector 'divergence') that count diverging sessions as corrupted.
CREATE TABLE divergences (
    experiment_id    INTEGER NOT NULL REFERENCES experiments(id),
    run_id           INTEGER NOT NULL REFERENCES runs(id),
    session_index    INTEGER NOT NULL,
    baseline_run_id  INTEGER NOT NULL REFERENCES runs(id),
    compared_turns   INTEGER NOT NULL,          -- turns both sides completed, compared in order
    turn_index       INTEGER,                   -- the first turn that differs; NULL when none did
    field            TEXT,                      -- content | tool calls | tool call N name | tool call N arguments | finish_reason
    rune             INTEGER,                   -- rune offset of the first difference within field
    baseline_excerpt TEXT,
    arm_excerpt      TEXT,
    PRIMARY KEY (run_id, session_index)
);
CREATE INDEX divergences_experiment ON divergences (experiment_id);
